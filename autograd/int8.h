// INT8 tensors with their scales and zero points, and the INT8 Linear:
// post-training static quantization's building blocks (W8A8).
//
// An Int8Tensor is 8-bit integers (i8 in [-127, 127] or u8 in [0, 255]) and
// the affine map back to real values, x ~= (q - zero_point) * scale, with
// one scale and zero point for the whole tensor or one per channel of one
// axis (a Linear's weight: per output channel, axis 0, zero points 0:
// symmetric, PyTorch's per_channel_symmetric qscheme).
//
// None of this records on the tape: INT8 is for inference (torch.ao's
// quantized modules have no backward either). Quantizing a tensor that
// requires grad is refused rather than silently cutting its graph.
#pragma once

#include <cstdint>
#include <optional>

#include "autograd/ops.h"
#include "core/tensor.h"

namespace mt::int8 {

struct Int8Tensor {
  Tensor data;         // kI8 or kU8, contiguous
  Tensor scales;       // f32 [channels] on data's device, each finite and > 0
  Tensor zero_points;  // i32 [channels] on data's device, each within data's range
  int64_t axis = -1;   // the channel axis, or -1: one scale for the whole tensor
};

// q = clamp(round_half_even(x / scale) + zero_point) per channel of `axis`
// (kernels/quantize/math.h). scales (f32) and zero_points (i32) hold one
// value per channel (one when axis is -1) and are checked here: a scale
// that is not finite and positive, or a zero point outside the dtype's
// range, is an mt::Error naming it.
Int8Tensor quantize(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis = -1,
                    DType dtype = kI8);
Int8Tensor quantize_per_tensor(const Tensor& x, double scale, int32_t zero_point, DType dtype = kI8);
// Per output channel (axis 0), symmetric: each row's scale is max|row| / 127
// (1 for an all-zero row, so it maps to 0 exactly), zero points 0.
Int8Tensor quantize_per_channel_symmetric(const Tensor& weight);

// (q - zero_point) * scale, rounded once into `dtype`.
Tensor dequantize(const Int8Tensor& q, DType dtype = kF32);

// Throws an mt::Error naming `what` unless q's parts fit together: i8/u8
// data, one f32 scale (finite, > 0) and one i32 zero point (in range) per
// channel, on one device. What loading a quantized checkpoint runs.
void check(const Int8Tensor& q, const std::string& what);

// How an INT8 Linear quantizes its input: u8 with the calibrated scale
// (f32 []) and zero point (i32 []); under SmoothQuant also divided by a
// smoothing factor per input channel (f32 [in]), fused into the same
// quantize pass as a per-channel scale, scale * smooth[j] (SmoothQuant
// folds 1 / smooth into the LayerNorm before; the arithmetic is the same).
struct InputQuantization {
  Tensor scale, zero_point;
  Tensor smooth;  // or undefined
  // zero_point's value, where the caller knows it and has checked scale,
  // zero point and smoothing factors (nn's INT8 layers, in check_int8):
  // linear and conv2d then read nothing back from the device. Without it
  // they check the values and read the zero point (the GEMM takes it by
  // value): host reads, a sync each on a GPU.
  std::optional<int32_t> zero_point_value = std::nullopt;
};

// An INT8 layer's output requantized for the INT8 layer it feeds, through
// ops that commute with quantizing (ReLU, max-pool, flatten, a folded batch
// norm: each keeps the order of values and the quantized zero): u8 with the
// next layer's input scale and zero point, ReLU applied first when `relu`
// (the model's ReLU then sees values it leaves as they are). The next
// layer takes a u8 input as quantized already, so no f32 activation is
// written between them: PyTorch's quantized models keep quint8 between
// layers the same way. For f32 activations the same bits as the float path
// (quantizing after the ReLU and max-pool), except that a NaN maps to the
// zero point before the max-pool instead of after it; bf16 activations
// skip a bf16 rounding. CPU only.
struct Requantization {
  double scale = 0;
  int32_t zero_point = 0;
  bool relu = false;
};

// y = act(x W^T + b) with W8A8: x is quantized to u8 as `input` says, W is
// i8 per output channel, the products sum in s32 (exact), and the epilogue
// scales by input.scale * weight scale, adds the bias (f32) and applies the
// activation before one rounding into x's dtype (f32 or bf16; f16 and f64
// inputs get f32). Under SmoothQuant W must hold W * smooth per input
// column (nn::Linear::smooth does that). On the CPU: kernels/gemm/int8.cpp
// (oneDNN's VNNI/AMX INT8 matmul, else an exact s32 loop); on sim and CUDA
// the INT8 Tensor Core rung (kernels/gemm/ladder/v9_int8_mma.cu), which a
// GPU runs only after its known-answer check passed there
// (kernels/gemm/int8.h). Without input.zero_point_value it reads the
// input's scale and zero point on the host: syncs on a GPU. A u8 x is
// quantized already with `input`'s scale and zero point (what the layer
// before requantized it into); with `requantize` the result is u8.
Tensor linear(const Tensor& x, const Int8Tensor& weight, const InputQuantization& input, const Tensor& bias = Tensor(),
              LinearActivation activation = LinearActivation::None,
              const std::optional<Requantization>& requantize = std::nullopt);

// The convolution's INT8 form (groups 1), as linear's: x [N, C, H, W]
// quantized to u8 per tensor (padding reads as the zero point, the value 0),
// W i8 [O, C, kH, kW] per output channel, s32 sums, the same epilogue. On
// sim and CUDA: patches gathered on the device and the same INT8 GEMM rung
// (kernels/conv/int8.h).
Tensor conv2d(const Tensor& x, const Int8Tensor& weight, const InputQuantization& input, const Tensor& bias = Tensor(),
              Size2 stride = 1, Size2 padding = 0, Size2 dilation = 1,
              const std::optional<Requantization>& requantize = std::nullopt);

}  // namespace mt::int8
