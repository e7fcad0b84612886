// Post-training static quantization of a model's Linear and Conv2d layers
// (W8A8): calibrate, then convert.
//
//   amp::int8::Calibrator calibrator(model, {.observer = "mse"});
//   { NoGradGuard no_grad; for (batch : calibration set) model.forward(batch); }
//   const amp::int8::QuantizeReport report = calibrator.convert();
//
// While a Calibrator is alive every layer it watches hands each input to
// its own observer (amp/int8_observers.h). convert() turns each watched
// layer into its INT8 form (nn::QuantizableLayer::to_int8): weights per output
// channel, symmetric (or one scale for the whole weight with
// per_tensor_weights); inputs u8 with zero point 128 and the observer's
// symmetric scale, amax / 127 (so both signs keep 127 levels: as many as
// fbgemm's reduce_range quint8 gives a ReLU output, and no asymmetric range
// is needed for GELU's or attention's signed inputs). Everything else stays
// in its float dtype (norms, attention, embeddings). A layer no calibration
// batch reached (a router read by its weight only, a layer the data never
// visits), a grouped convolution and a --keep-float layer stay float, and
// the report says why.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "amp/int8_observers.h"
#include "nn/layers.h"

namespace mt::amp::int8 {

struct QuantizeOptions {
  // make_observer's names. mse by default: it kept >= 99% of the float
  // accuracy on every model measured (so does entropy since its zero-spike
  // fix; before it, entropy clipped the cnn's to 98.98%); PyTorch's histogram
  // observer also minimises the quantization error.
  std::string observer = "mse";
  bool per_tensor_weights = false;
  std::vector<std::string> keep_float;  // dotted layer names left in float by choice
};

// SmoothQuant's first pass (Xiao et al. 2023), for transformers whose
// activations have outlier channels that one per-tensor scale cannot serve:
// while alive, records max |x_j| per input channel j of every Linear the
// options would quantize; apply(alpha) then smooths each one
// (nn::Linear::smooth) with s_j = max|x_j|^alpha / max_n |W_nj|^(1 - alpha),
// floored at 1e-5 as the paper's code does, moving the difficulty from the
// activations into the weights (alpha = 0.5: evenly). The calibration
// proper (Calibrator) runs after, on the smoothed inputs.
class SmoothQuantCalibrator {
 public:
  SmoothQuantCalibrator(nn::Module& model, const QuantizeOptions& options);
  ~SmoothQuantCalibrator();
  SmoothQuantCalibrator(const SmoothQuantCalibrator&) = delete;
  SmoothQuantCalibrator& operator=(const SmoothQuantCalibrator&) = delete;
  // Smooths every Linear a batch reached and detaches; returns their names.
  std::vector<std::string> apply(double alpha);

 private:
  struct Watched {
    std::string name;
    nn::Linear* layer;
    std::shared_ptr<Tensor> channel_amax;  // f32 [in], undefined until a batch
  };
  void detach();
  std::vector<Watched> watched_;
};

struct KeptFloat {
  std::string layer, reason;
};

struct QuantizeReport {
  std::vector<std::string> quantized;  // dotted names, in module order
  std::vector<KeptFloat> kept_float;
};

class Calibrator {
 public:
  Calibrator(nn::Module& model, QuantizeOptions options);
  ~Calibrator();
  Calibrator(const Calibrator&) = delete;
  Calibrator& operator=(const Calibrator&) = delete;

  // Converts every observed layer and detaches the observers; call once.
  QuantizeReport convert();

 private:
  struct Watched {
    std::string name;
    nn::QuantizableLayer* layer;
    std::unique_ptr<Observer> observer;
  };
  void detach();

  QuantizeOptions options_;
  std::vector<Watched> watched_;
  std::vector<KeptFloat> kept_float_;
  bool converted_ = false;
};

// A BatchNorm2d folded into the Conv2d before it (dotted names).
struct FoldedBatchNorm {
  std::string conv, batch_norm;
  bool operator==(const FoldedBatchNorm&) const = default;
};

// Folds every (Conv2d, BatchNorm2d) pair the model's modules list
// (nn::Module::conv_batch_norm_pairs) with Conv2d::fold_batch_norm, in
// module order, before calibration: the batch norm's pass over the
// activations goes away and the convolution (float, or INT8 once converted)
// applies it. Eval only, as every INT8 model is. Returns the pairs folded.
std::vector<FoldedBatchNorm> fold_batch_norms(nn::Module& model);

// Loading a checkpoint whose batch norms were folded: each listed pair must
// be one the model lists (a file naming any other pair is refused: folding
// a batch norm whose input also goes elsewhere would change the model);
// the convolution gets its bias slot and the batch norm is marked folded, so
// load_state_dict fills the folded weights.
void prepare_folded_batch_norms(nn::Module& model, const std::vector<FoldedBatchNorm>& folded);

// An INT8 layer handing u8 activations to the next (absolute dotted names).
using Int8Handoff = nn::Module::Int8Handoff;

// After convert (and after loading an INT8 checkpoint): every handoff the
// model's modules declare (nn::Module::int8_handoffs) whose two layers are
// INT8, the second one per tensor (not SmoothQuant's per-channel input),
// makes the first requantize its output with the second's input scale and
// zero point (nn::QuantizableLayer::requantize_output): u8 between them, no
// f32 activation written, the same values as quantizing after the ReLU and
// max-pool. Returns the handoffs made.
std::vector<Int8Handoff> chain_int8_layers(nn::Module& model);
// Loading: exactly the listed handoffs, each one the model declares between
// two INT8 layers (an mt::Error names one that is not).
void apply_int8_handoffs(nn::Module& model, const std::vector<Int8Handoff>& handoffs);

// The u8 zero point of every calibrated input: the middle of [0, 255].
inline constexpr int32_t kInputZeroPoint = 128;

// An INT8 checkpoint's layers: makes each named layer's INT8 slots (with
// SmoothQuant's input_smooth for Linears when `smoothed`) so load_state_dict
// can fill them (an mt::Error names one that is not a Linear or Conv2d of
// `model`), and after loading, check_int8_layers refuses scales and zero
// points that do not fit.
void prepare_int8_layers(nn::Module& model, const std::vector<std::string>& layers, bool smoothed = false);
void check_int8_layers(nn::Module& model);
// The dotted names of model's INT8 layers.
std::vector<std::string> int8_layer_names(nn::Module& model);

}  // namespace mt::amp::int8
