#include "kernels/common/onednn.h"

#include <string>

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

DType compute_dtype(DType dtype) { return dtype == kF16 ? kF32 : dtype; }

void append(PrimitiveKey& key, const dnnl::memory::desc& md) {
  key.push_back(static_cast<int64_t>(md.data_type()));
  for (const int64_t d : md.dims()) key.push_back(d);
  for (int i = 0; i < md.data.ndims; ++i) key.push_back(md.data.format_desc.blocking.strides[i]);
}

bool is_reference(const dnnl::primitive_desc_base& pd) { return std::string(pd.impl_info_str()).rfind("ref", 0) == 0; }

LayoutBuffer::LayoutBuffer(const dnnl::memory::desc& plain, void* data, const dnnl::memory::desc& wanted)
    : plain_(plain, engine(), data) {
  if (wanted == plain) {
    memory_ = plain_;
    return;
  }
  scratch_ = HostScratch<std::byte>(static_cast<int64_t>(wanted.get_size()));
  memory_ = dnnl::memory(wanted, engine(), scratch_.get());
}

LayoutBuffer LayoutBuffer::input(const dnnl::memory::desc& plain, const void* data, const dnnl::memory::desc& wanted) {
  LayoutBuffer buffer(plain, const_cast<void*>(data), wanted);
  if (!buffer.scratch_.empty()) {
    dnnl::reorder(buffer.plain_, buffer.memory_).execute(stream(), buffer.plain_, buffer.memory_);
    stream().wait();
  }
  return buffer;
}

LayoutBuffer LayoutBuffer::output(const dnnl::memory::desc& plain, void* data, const dnnl::memory::desc& wanted) {
  return LayoutBuffer(plain, data, wanted);
}

LayoutBuffer LayoutBuffer::view(const dnnl::memory::desc& md, const void* data) {
  return LayoutBuffer(md, const_cast<void*>(data), md);
}

void LayoutBuffer::commit() {
  if (scratch_.empty()) return;
  dnnl::reorder(memory_, plain_).execute(stream(), memory_, plain_);
  stream().wait();
}

}  // namespace mt::kernels::onednn
