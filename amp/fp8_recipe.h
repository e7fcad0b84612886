// FP8 training recipes and the region that applies them (like Transformer
// Engine's fp8_autocast), on top of BF16 autocast:
//
//   amp::Fp8State fp8(amp::Fp8Recipe::delayed({16, amp::AmaxAlgo::Max, 0}));
//   fp8.keep_high_precision(model.head);      // opt a module out
//   for (...) {
//     { amp::Autocast ac(device, kBF16); amp::Fp8Autocast region(fp8);
//       loss = loss_fn(model.forward(x), y); }
//     loss.backward();
//     fp8.update();                           // delayed scaling: next step's scales
//     optimizer.step();
//   }
//
// Inside the region every Linear whose weight is not opted out runs its
// three GEMMs in FP8 (autograd/fp8.h: fp8::linear). The recipes:
//   current  per-tensor scales from this step's amax (torchao's tensorwise):
//            E4M3 forward, E5M2 gradients (HYBRID)
//   delayed  per-tensor scales from an amax history (Transformer Engine's
//            DelayedScaling, amp/fp8_scaling.h): one read per quantization;
//            E4M3 forward, E5M2 gradients (HYBRID)
//   block    DeepSeek-V3's: 1x128 tiles for inputs and gradients, 128x128
//            blocks for weights, E4M3 everywhere, K promoted to f32 every 128
// Each Linear's state is made on its first FP8 forward and kept, keyed by
// its weight, for as long as that weight lives (update() drops the state of
// dead weights). A weight that is not a leaf (computed in the step: a cast,
// a parametrization) has no lasting identity to key state by and stays in
// high precision.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "amp/fp8_scaling.h"
#include "autograd/fp8.h"
#include "nn/module.h"

namespace mt::amp {

enum class Fp8RecipeKind { Current, Delayed, Block };

struct Fp8Recipe {
  Fp8RecipeKind kind = Fp8RecipeKind::Current;
  DelayedScalingOptions delayed;  // history_len, algo, margin (delayed only)
  int margin = 0;                 // current only: scale = max / amax * 2^-margin

  static Fp8Recipe current(int margin = 0) { return {Fp8RecipeKind::Current, {}, margin}; }
  static Fp8Recipe delayed_scaling(DelayedScalingOptions options = {}) { return {Fp8RecipeKind::Delayed, options, 0}; }
  static Fp8Recipe block() { return {Fp8RecipeKind::Block, {}, 0}; }
  std::string name() const;  // "current", "delayed", "block"
};

// "current" | "delayed" | "block" -> the kind; mt::Error otherwise. And back.
Fp8RecipeKind parse_fp8_recipe(const std::string& text);
std::string fp8_recipe_name(Fp8RecipeKind kind);

// Where FP8 hurts, for one GEMM operand of one Linear, over the
// quantizations since the statistics were last taken.
struct Fp8TensorStatistics {
  std::string parameter;  // the Linear's weight, "blocks.0.attn.c_attn.weight"
  std::string role;       // input | weight | grad_output
  double amax = 0;        // max |x| of the last quantization
  double scale_min = 0;   // its scales (one for per-tensor recipes)
  double scale_max = 0;
  double saturated = 0;  // share of elements clipped at the format's largest value (|x * scale| > max)
  double flushed = 0;    // share of elements that were not 0 and became 0
  int64_t elements = 0;  // elements quantized
};

// What FP8 training keeps, in bytes, by theory, for the Linears that ran FP8
// so far (the memory ledger's fp8_* categories, `mixtape train --memory`):
//   activations   each Linear's saved input: M x K bytes along M, and its
//                 scales in the input's layout (M: the most rows a recorded
//                 forward of it had; none when its weight needs no grad)
//   weight_casts  each Linear's saved weight: N x K bytes and its scales
//                 (none when its input needs no grad, as a first layer's)
//   state         delayed scaling: three amax histories of H f32 with their
//                 scale and scale_inv, 12 (H + 2) bytes per Linear; 0 else
// Scales are 4 bytes each. A Linear called more than once per forward
// counts once.
struct Fp8MemoryTheory {
  int64_t activations = 0;
  int64_t weight_casts = 0;
  int64_t state = 0;
};

// The recipe's per-Linear state for a model; the FP8 region asks it.
class Fp8State final : public fp8::Region {
 public:
  explicit Fp8State(Fp8Recipe recipe);
  ~Fp8State() override;

  // Every parameter of `module` (and its children) stays in high precision;
  // `reason` is what the dtype report says of it.
  void keep_high_precision(const nn::Module& module, std::string reason = "kept by keep_high_precision");
  fp8::LinearScaling* scaling_for(const Tensor& weight) override;
  std::string high_precision_reason(const Tensor& weight) const override;
  // After each step's backward: delayed scaling turns the amax histories into
  // the next step's scales (on the device); current and block need nothing.
  // Every recipe drops here the state of Linears whose weight has died.
  void update();
  // Delayed scaling under data parallel: the newest amax of every history
  // (f32 [1] views), to be reduced with a max over the ranks before update()
  // so every rank quantizes with the same scales. In the order the Linears
  // first ran (the same on every rank; their addresses are not). Empty for
  // current and block scaling, whose scales come from each rank's own tensors.
  std::vector<Tensor> amaxes_to_reduce() const;
  // Checkpoints: "<parameter>.<input|weight|grad_output>.<amax_history|scale>"
  // for each of `model`'s weights with delayed state (empty for current and
  // block scaling, which keep none). load_state_dict makes the state for
  // each weight named and refuses names `model` lacks and hostile values.
  std::map<std::string, Tensor> state_dict(const nn::Module& model) const;
  void load_state_dict(const nn::Module& model, const std::map<std::string, Tensor>& state);

  // From now on each quantization also counts its saturated and flushed
  // elements and keeps its amax, on the device (two more passes over each
  // operand: a diagnostic, off by default).
  void collect_statistics(bool on) { flags_.statistics = on; }
  bool collects_statistics() const { return flags_.statistics; }
  // The statistics of `model`'s Linears since the last call, in parameter
  // order and roles, read back to the host (a sync), then reset.
  std::vector<Fp8TensorStatistics> take_statistics(const nn::Module& model);

  // At a non-finite loss: the FP8 operand whose amax went non-finite first
  // ("fc2.weight grad_output: amax inf, 3 step(s) ago"), from delayed
  // scaling's histories (which say when) or, with statistics on, the last
  // amaxes; "" when every recorded amax is finite or none was recorded.
  // Reads back to the host.
  std::string first_nonfinite_operand(const nn::Module& model) const;

  // --fp8-shadow: while on, every FP8 Linear's forward also runs its
  // high-precision twin on the same inputs and keeps the relative error of
  // its output (on the device: one extra GEMM and a norm, no host read).
  void shadow_forward(bool on) { flags_.shadow = on; }
  // The relative errors of `model`'s FP8 Linears since the last call, by
  // weight in parameter order, read back to the host (a sync), then reset.
  std::vector<std::pair<std::string, double>> take_shadow_errors(const nn::Module& model);

  const Fp8Recipe& recipe() const { return recipe_; }
  // What the Linears' scalings read of the state (by reference: a switch
  // here reaches every Linear at once).
  struct Flags {
    bool statistics = false;
    bool shadow = false;
  };
  // A recipe's fp8::LinearScaling with its per-step update (fp8_recipe.cpp).
  class Scaling;
  size_t linears() const { return states_.size(); }  // the Linears that ran FP8 so far
  Fp8MemoryTheory memory_theory() const;

 private:
  struct Entry {
    std::weak_ptr<TensorImpl> weight;  // keys are addresses: an entry whose weight died is stale
    std::unique_ptr<Scaling> scaling;
    int64_t first_use = 0;  // the order the Linears first ran: the same on every rank
  };
  Fp8Recipe recipe_;
  Flags flags_;
  struct Kept {
    std::weak_ptr<TensorImpl> weight;
    std::string reason;
  };
  std::map<const TensorImpl*, Kept> kept_;
  std::map<const TensorImpl*, Entry> states_;
  int64_t next_first_use_ = 0;
};

// While alive, eligible Linears on this thread run in FP8 under `state`.
class Fp8Autocast {
 public:
  explicit Fp8Autocast(Fp8State& state);
  ~Fp8Autocast();
  Fp8Autocast(const Fp8Autocast&) = delete;
  Fp8Autocast& operator=(const Fp8Autocast&) = delete;

 private:
  fp8::Region* previous_;
};

}  // namespace mt::amp
