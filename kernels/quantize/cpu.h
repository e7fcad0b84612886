// The quantize family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/quantize/quantize.h) calls it. Tensors are contiguous and on the
// host; scales f32 and zero points i32, one per channel.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"
#include "kernels/common/strided.h"
#include "kernels/quantize/api.h"

namespace mt::kernels::cpu {

void int8_quantize(const Tensor& x, const Tensor& scales, const Tensor& zero_points, QuantizeAxis axis,
                   const Tensor& out);
// The output of an INT8 GEMM or convolution (kernels/gemm/int8.cpp,
// kernels/conv/int8.cpp): its f32 values live in `out` itself when out is
// f32, else in scratch, rounded once into a bf16 out by commit(), or, for a
// u8 out, requantized (quantize_value with `scale` and `zero_point`) by
// finish() a block at a time, while the block is in cache. A kernel that
// computes its values a block at a time elsewhere hands them to store()
// instead: then a u8 out needs no f32 scratch of its size at all.
class Int8Output {
 public:
  Int8Output(const Tensor& out, float scale, int32_t zero_point);
  // All the f32 values (allocated on first use for a u8 out); call before
  // any thread works on them.
  float* values();
  // Values [begin, begin + n) are final: a u8 out takes them requantized (on the calling thread).
  void finish(int64_t begin, int64_t n);
  // Values [begin, begin + n) are these (instead of values() then finish()).
  void store(int64_t begin, const float* values, int64_t n);
  bool requantizes() const { return !buffer_; }
  void commit();

 private:
  Tensor out_;
  float scale_;
  int32_t zero_point_;
  std::optional<OutputBuffer<float>> buffer_;  // f32 and bf16 outs
  HostScratch<float> scratch_;                 // a u8 out's values
  float* values_ = nullptr;
};
void int8_dequantize(const Tensor& q, const Tensor& scales, const Tensor& zero_points, QuantizeAxis axis,
                     const Tensor& out);

}  // namespace mt::kernels::cpu
