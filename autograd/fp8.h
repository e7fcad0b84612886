// FP8 tensors with their scales: quantize, dequantize, and the FP8 GEMM.
//
// An Fp8Tensor is FP8 bytes (E4M3 or E5M2, runtime/fp8.h) and the FP32
// scales to read them with: x ~= value(data) * scale_inv, one scale per group
// of elements. The groups follow the field's recipes:
//   PerTensor     one scale (Transformer Engine's delayed and current scaling,
//                 torchao's tensorwise)
//   PerRow        one per row of the last dim (torchao's rowwise)
//   Tiles1x128    one per 1x128 tile (DeepSeek-V3's activations and gradients)
//   Blocks128x128 one per 128x128 block (DeepSeek-V3's weights)
// A tensor is seen as rows x cols (cols = the last dim); edge groups are
// ragged when cols or rows are not multiples of 128.
//
// None of this records on the tape: an FP8 tensor is storage for a GEMM
// operand. Scales and amax live on the tensor's device and are computed
// there, so quantizing never needs a host sync.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace mt::fp8 {

enum class Format { E4M3, E5M2 };
DType dtype_of(Format format);
Format format_of(DType dtype);    // mt::Error unless an FP8 dtype
float max_finite(Format format);  // 448, 57344

enum class ScaleLayout { PerTensor, PerRow, Tiles1x128, Blocks128x128 };
std::string_view layout_name(ScaleLayout layout);  // "tensor", "row", "1x128", "128x128"
// The shape of the scales a tensor of `sizes` has in `layout` (below).
Shape scale_shape(const Shape& sizes, ScaleLayout layout);

struct Fp8Tensor {
  Tensor data;       // kF8E4M3 or kF8E5M2, contiguous, the logical shape
  Tensor scale_inv;  // f32 on data's device: [] | [rows] | [rows, ceil(cols/128)] | [ceil(rows/128), ceil(cols/128)]
  ScaleLayout layout = ScaleLayout::PerTensor;
  // data's transpose, when the quantize wrote it in the same pass (per-tensor
  // scales, with_transpose): t() then hands it over instead of copying.
  Tensor data_t;

  Format format() const { return format_of(data.dtype()); }
  const Shape& sizes() const { return data.sizes(); }
  Device device() const { return data.device(); }
  // The transpose of a 2-D tensor whose layout transposes into itself (per
  // tensor; 128x128 blocks, whose grid transposes with them), as contiguous
  // copies (or data_t, already there). Rows and 1x128 tiles turn into
  // columns and 128x1 tiles, which the GEMM does not take: quantize the
  // transposed high-precision tensor.
  Fp8Tensor t() const;
};

// Current scaling: each group's scale from its own amax this call,
// scale = max_finite / amax * 2^-margin (amax floored at 1e-12).
// with_transpose (per-tensor scales, x 2-D) also writes data_t in the
// cast's pass (kernels/fp8: 32 x 32 tiles): what the weight gradient reads.
Fp8Tensor quantize(const Tensor& x, Format format, ScaleLayout layout = ScaleLayout::PerTensor, int margin = 0,
                   bool with_transpose = false);

// Delayed scaling: a per-tensor scale already on the device (f32 []).
// When amax_out (f32 [] on the device) is given, max |x| of this same pass is
// folded into it (amax_out = max(amax_out, max |x|)): delayed scaling points
// it at the newest slot of its amax history.
Fp8Tensor quantize_with_scale(const Tensor& x, Format format, const Tensor& scale, const Tensor& amax_out = Tensor(),
                              bool with_transpose = false);

// max |x| as an f32 [] tensor on x's device (NaN if x holds one).
Tensor amax(const Tensor& x);

// Where FP8 hurts: counts (f32 [2], a running count on q's device) += the
// elements of x that q clipped at the format's largest value (|x * scale| >
// max) and those that were not 0 and became 0. x is what q was quantized from.
void count_saturated_and_flushed(const Tensor& x, const Fp8Tensor& q, const Tensor& counts);

// value(data) * scale_inv, rounded once into `dtype`.
Tensor dequantize(const Fp8Tensor& q, DType dtype = kF32);

// a @ b^T with FP32 accumulation: a [M, K], b [N, K] (both quantized along
// K, as a Linear's input and weight are), out [M, N] in out_dtype, plus an
// optional bias [N] added in f32 before the one rounding. Per-tensor and
// per-row scales multiply the f32 product; 1x128 tiles and 128x128 blocks
// (which both operands must then use) split K into 128-wide groups whose f32
// partial products are scaled and summed in f32 (DeepSeek-V3's promotion).
// Every FP8 value is a bf16 value, so on the CPU the products run as exact
// bf16 GEMMs (oneDNN's native dot products where the CPU has them); on sim
// and CUDA as f32 GEMMs of the exactly widened operands.
Tensor gemm_nt(const Fp8Tensor& a, const Fp8Tensor& b, DType out_dtype, const Tensor& bias = Tensor());

// ---- FP8 linear layers ------------------------------------------------------

// The three GEMM operands of a Linear.
enum class Fp8Role { Input, Weight, GradOutput };

// One Linear's FP8 scaling under a recipe (amp/fp8_recipe.h has the
// recipes: current, delayed, block). It quantizes each operand 2-D along its
// last dim, and says whether that operand's quantized tensor transposes
// exactly (per-tensor and 128x128 block scales do; rows and 1x128 tiles do
// not, and backward then quantizes the transposed high-precision tensor).
class LinearScaling {
 public:
  virtual ~LinearScaling() = default;
  // with_transpose: the caller will want the result's t() (per-tensor
  // layouts then write it in the cast's pass; others ignore it).
  virtual Fp8Tensor quantize(Fp8Role role, const Tensor& x, bool with_transpose = false) = 0;
  virtual bool transposes(Fp8Role role) const = 0;
  // After a forward that recorded on the tape: its rows (M) and whether it
  // saved the input and the weight (the memory theory reads them).
  virtual void note_saved_for_backward(int64_t /*rows*/, bool /*input*/, bool /*weight*/) {}
  // --fp8-shadow: when wants_shadow(), the forward also runs the Linear's
  // high-precision twin (the autocast dtype's GEMM) on the same inputs and
  // hands over ||y_fp8 - y_twin|| / ||y_twin||, f32 [] on the device.
  virtual bool wants_shadow() const { return false; }
  virtual void note_shadow_error(const Tensor& /*relative_error*/) {}
};

// y = x W^T + b with its three GEMMs in FP8 and f32 accumulation:
// forward fp8(x) fp8(W)^T, input gradient fp8(dy) fp8(W), weight gradient
// fp8(dy)^T fp8(x), each operand quantized along its GEMM's K. The output
// is in the autocast dtype when autocast is on (else x's dtype); the weight
// and bias gradients come back in their own dtype (f32 masters), the input
// gradient in x's. Saves x (along M, as the weight gradient reads it) and W
// as FP8 + scales: one byte per element, half of bf16's, filed in the memory
// ledger as fp8_activations and fp8_weight_casts. `scaling` must outlive
// the backward pass.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, LinearScaling& scaling);

// An FP8 region (amp::Fp8Autocast installs one): while it is active on this
// thread, mt::linear asks it for each Linear's scaling by the Linear's
// weight, and runs fp8::linear unless it answers nullptr (that Linear stays
// in BF16/FP32: embeddings, heads, first and last layers by choice).
class Region {
 public:
  virtual ~Region() = default;
  virtual LinearScaling* scaling_for(const Tensor& weight) = 0;
  // Why scaling_for answered nullptr for `weight` (the dtype report shows it).
  virtual std::string high_precision_reason(const Tensor& weight) const = 0;
};
Region* active_region();
// Returns the region it replaces (amp::Fp8Autocast restores it).
Region* set_active_region(Region* region);

// While alive, no FP8 region is active on this thread (an op whose backward
// recomputes a Linear outside any region, as linear_cross_entropy does,
// runs its forward Linears so too).
class NoRegionGuard {
 public:
  NoRegionGuard() : previous_(set_active_region(nullptr)) {}
  ~NoRegionGuard() { set_active_region(previous_); }
  NoRegionGuard(const NoRegionGuard&) = delete;
  NoRegionGuard& operator=(const NoRegionGuard&) = delete;

 private:
  Region* previous_;
};

// Checkpoints: `name` holds the data (safetensors F8_E4M3 / F8_E5M2) and
// `name.scale_inv` the scales; the layout is read back from their shapes.
void add_to_state(std::map<std::string, Tensor>& state, const std::string& name, const Fp8Tensor& q);
// mt::Error when the entry is missing, not FP8, or its scales are not positive finite f32 of a layout's shape.
Fp8Tensor from_state(const std::map<std::string, Tensor>& state, const std::string& name);

}  // namespace mt::fp8
