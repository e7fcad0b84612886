#include "kernels/common/onednn.h"

namespace mt::kernels::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine cpu(dnnl::engine::kind::cpu, 0);
  return cpu;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

std::optional<dnnl::memory::data_type> data_type(DType dtype) {
  if (dtype == kF32) return dnnl::memory::data_type::f32;
  if (dtype == kBF16) return dnnl::memory::data_type::bf16;
  return std::nullopt;
}

}  // namespace mt::kernels::onednn
