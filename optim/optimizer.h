// Optimizers with optional FP32 master weights.
//
// Three precision modes (see the mixed-precision issue):
//  (a) autocast: f32 parameters, low-precision compute; the optimizer is plain f32.
//  (b) master weights: f16/bf16 parameters, the optimizer keeps f32 masters and
//      f32 state, updates the masters and writes the rounded copy into the
//      parameter (optionally by stochastic rounding for bf16).
//  (c) pure low precision: no masters; state and update in the parameter's
//      dtype, to show honestly what goes wrong (updates below an ulp vanish).
//
// Each step is one fused kernel call per (param group, parameter dtype). The
// kernel reads found_inf and inv_scale on the device, so under a GradScaler
// the step never syncs with the host.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/optim/optim.h"

namespace mt::optim {

// Parameters with their own hyper-parameters. One left unset takes the
// optimizer's (AdamWOptions / SgdOptions), as a PyTorch param group without
// 'lr' takes the optimizer's default; once the optimizer is made, every
// group has both set (schedulers and state dicts read and write them).
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

// What a group's unset hyper-parameters become: the optimizer's options.
struct GroupDefaults {
  double lr, weight_decay;
};

// How an optimizer stores its moments (AdamW's exp_avg and exp_avg_sq, SGD's
// momentum): kernels/optim/state_format.h says how each works.
enum class StateDtype {
  F32,   // 4 bytes per value
  BF16,  // 2 bytes, written by stochastic rounding
  Int8,  // 1 byte + one f32 absmax per block (bitsandbytes' block-wise 8-bit state)
};
const char* state_dtype_name(StateDtype dtype);         // "f32" | "bf16" | "int8"
StateDtype parse_state_dtype(const std::string& text);  // the inverse; anything else is an error

struct PrecisionOptions {
  bool master_weights = false;       // mode (b) for f16/bf16 parameters
  bool stochastic_rounding = false;  // bf16 copies written from masters by stochastic rounding
  uint64_t seed = 0;                 // for stochastic rounding
  // Master weights and optimizer state of device parameters live in host
  // memory (pinned where a GPU allows) and are streamed to the device one
  // parameter at a time for its update and back: the last rung of the
  // low-memory ladder. The same kernel runs on the same values, so results
  // are bit-identical to the resident optimizer; the price is two transfers
  // of the state per step. No effect on CPU parameters.
  bool offload_state = false;
  // The moments' storage. Int8 leaves tensors under min_quantized_numel
  // values in f32, as bitsandbytes' min_8bit_size does (their state is small,
  // and their statistics, like a bias's, are the easiest to hurt); so do
  // parameters given to keep_f32_state (embeddings: bitsandbytes'
  // "StableEmbedding" lesson). Pure low precision (f16/bf16 parameters, no
  // master) keeps its state in the parameter's dtype under F32.
  StateDtype state_dtype = StateDtype::F32;
  int64_t state_block = 2048;          // Int8: values per absmax, a power of two from 64 to 4096
  int64_t min_quantized_numel = 4096;  // Int8 only
};

using StateDict = std::map<std::string, Tensor>;

class OffloadPipeline;

class Optimizer {
 public:
  Optimizer(std::vector<ParamGroup> groups, GroupDefaults defaults, PrecisionOptions precision);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient. `amp` carries the
  // GradScaler's device-side inv_scale and found_inf (empty without a scaler).
  void step(const kernels::AmpControl& amp = {});
  void zero_grad();  // sets gradients to none, as PyTorch does by default
  // A device-side multiplier of every group's lr (f64 [1], read by the update
  // kernels; set by a scheduler with a device counter). Undefined: none.
  void set_lr_factor(const Tensor& factor) { lr_factor_ = factor; }

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  std::vector<Tensor> parameters() const;
  std::vector<Tensor> gradients() const;  // the defined ones
  bool has_master_weights() const { return precision_.master_weights; }
  // An optimizer that steps only part of the model's gradients (a ZeRO
  // shard: dist::ShardedOptimizer sets it) must skip when any part found an
  // inf: `combine` makes a found_inf flag global (an all-reduce with max, on
  // the device). The GradScaler calls combine_found_inf before every step
  // reads the flag, so a sharded optimizer owns its ranks' agreement.
  void set_found_inf_combiner(std::function<void(const Tensor&)> combine) { combine_found_inf_ = std::move(combine); }
  void combine_found_inf(const Tensor& found_inf) const {
    if (combine_found_inf_) combine_found_inf_(found_inf);
  }
  // The f32 master of a parameter (undefined when it has none).
  Tensor master_of(const Tensor& param) const;
  // This parameter's moments stay f32 whatever state_dtype says (call before
  // its first step; bitsandbytes' GlobalOptimManager.override_config).
  void keep_f32_state(const Tensor& param);
  // `param` is a part of a parameter of `numel` elements (a sharded
  // optimizer's view of its shard): its 8-bit state is chosen as the whole
  // parameter's would be, by min_quantized_numel, so a rank's small part of
  // a large tensor is quantized and no part of a small one is. Call before
  // its first step (dist::ShardedOptimizer and FullyShardedDataParallel do).
  void set_state_numel(const Tensor& param, int64_t numel);
  const PrecisionOptions& precision() const { return precision_; }

  // Named tensors: per-parameter state ("state.<i>.<name>", i counting
  // parameters across groups in order) and per-group hyperparameters.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 protected:
  struct ParamState {
    Tensor master;
    Tensor state1;
    Tensor state2;
    Tensor step;
    kernels::StateFormat format = kernels::StateFormat::Plain;
    Tensor absmax1;  // Int8Blockwise: one f32 per block of state1 / state2
    Tensor absmax2;
  };
  // Subclasses run their fused kernel on the slots of one (group, dtype) bucket.
  virtual void update(const std::vector<kernels::ParamSlot>& slots, const ParamGroup& group,
                      const kernels::AmpControl& amp, const kernels::StochasticRounding& rounding) = 0;
  // Which state tensors a parameter needs: 0, 1 or 2.
  void check_state_keys(const StateDict& state) const;
  virtual int state_count(const ParamGroup& group) const = 0;
  virtual const char* state_name(int index) const = 0;
  virtual const char* name() const = 0;

 private:
  ParamState& state_for(size_t group, size_t index);
  void check_stateless_param(const Tensor& param, const char* what) const;
  // What the fused kernel gets for one parameter (its state made on first use).
  kernels::ParamSlot slot_for(size_t group, size_t index);
  // How a parameter's moments are stored, and in which dtype.
  kernels::StateFormat state_format_for(const Tensor& param) const;
  // dynamic_codes() on `device` (8-bit state off the CPU reads it there).
  const Tensor& codes_on(Device device);
  // Loads one moment from a state dict into s (any saved format into s's);
  // says how it was converted, or "" when it was copied bit for bit.
  std::string load_moment(ParamState& s, int k, const StateDict& state, const std::string& key);
  // update() one slot at a time with its master and state copied to the
  // device before and back to the host after, on a side stream that overlaps
  // them with the updates (offload_state; optim/offload.h).
  void update_offloaded(const std::vector<kernels::ParamSlot>& slots, const ParamGroup& group,
                        const kernels::AmpControl& amp, const kernels::StochasticRounding& rounding);
  bool offloaded(const Tensor& param) const { return precision_.offload_state && !param.device().is_cpu(); }

  std::vector<ParamGroup> groups_;
  PrecisionOptions precision_;
  std::vector<std::vector<ParamState>> state_;  // [group][param]
  Tensor lr_factor_;
  std::unique_ptr<OffloadPipeline> offload_;  // created at the first offloaded update
  std::vector<const void*> f32_state_params_;  // keep_f32_state's, by TensorImpl
  std::unordered_map<const void*, int64_t> state_numel_;  // set_state_numel's, by TensorImpl
  Tensor codes_;                                // codes_on's cache
  std::function<void(const Tensor&)> combine_found_inf_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {}, PrecisionOptions precision = {});
  AdamW(const std::vector<Tensor>& params, AdamWOptions options = {}, PrecisionOptions precision = {});

 private:
  void update(const std::vector<kernels::ParamSlot>& slots, const ParamGroup& group, const kernels::AmpControl& amp,
              const kernels::StochasticRounding& rounding) override;
  int state_count(const ParamGroup&) const override { return 2; }
  const char* state_name(int index) const override { return index == 0 ? "exp_avg" : "exp_avg_sq"; }
  const char* name() const override { return "AdamW"; }
  AdamWOptions options_;
};

struct SgdOptions {
  double lr = 1e-2;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

class SGD final : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, SgdOptions options = {}, PrecisionOptions precision = {});
  SGD(const std::vector<Tensor>& params, SgdOptions options = {}, PrecisionOptions precision = {});

 private:
  void update(const std::vector<kernels::ParamSlot>& slots, const ParamGroup& group, const kernels::AmpControl& amp,
              const kernels::StochasticRounding& rounding) override;
  int state_count(const ParamGroup&) const override { return options_.momentum != 0 ? 1 : 0; }
  const char* state_name(int) const override { return "momentum_buffer"; }
  const char* name() const override { return "SGD"; }
  SgdOptions options_;
};

// A moment of a state dict ("state.<i>.exp_avg", "...exp_avg_sq",
// "...momentum_buffer") as f32 values on the CPU: 8-bit codes dequantized
// with their absmax and 'format.state_block', both checked as
// load_state_dict checks them; other floating dtypes widened. ZeRO-1 reads
// 8-bit state through it, whose blocks do not line up with its shards.
Tensor moment_values(const StateDict& state, const std::string& key);

// Clips the global L2 norm of the gradients to max_norm in place and returns
// the norm before clipping (an f32 0-dim tensor on the gradients' device, so
// no sync). One fused pass computes the norm, one scales. Calling it on
// gradients a GradScaler has scaled but not unscaled is an error.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// The same global L2 norm, measured only (one fused pass, nothing scaled):
// what `mixtape train --report` plots when it does not clip. Gradients a
// GradScaler scaled and has not unscaled may be measured too: pass its scale
// tensor, and the norm comes back divided by it (the true norm).
Tensor grad_norm(const std::vector<Tensor>& params, const Tensor& loss_scale = Tensor());

}  // namespace mt::optim
