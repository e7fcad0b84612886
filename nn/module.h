// nn::Module: the base of every layer and model.
//
// A module registers its parameters, buffers and children by name, in order,
// so named_parameters() yields PyTorch's dotted names ("features.0.weight")
// and state_dict() matches what a PyTorch model of the same architecture
// would save. Writing a model reads like libtorch's C++ frontend without the
// holder macros:
//
//   struct Mlp : mt::nn::Module {
//     std::shared_ptr<mt::nn::Linear> fc1, fc2;
//     Mlp() {
//       fc1 = register_module("fc1", std::make_shared<mt::nn::Linear>(784, 256));
//       fc2 = register_module("fc2", std::make_shared<mt::nn::Linear>(256, 10));
//     }
//     mt::Tensor forward(const mt::Tensor& x) override { return fc2->forward(mt::relu(fc1->forward(x))); }
//   };
//
// A forward with other arguments is an ordinary member function: declare
// the forward your module needs and call it through the pointer,
//
//   struct Block : mt::nn::Module {
//     mt::Tensor forward(const mt::Tensor& x, const mt::Tensor& mask);   // no override
//   };
//   y = block->forward(x, mask);
//
// (libtorch's modules do the same). The single-input forward(x) that
// Sequential and operator() call is then left undefined, and calling it is
// an mt::Error naming the module.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace mt::nn {

using StateDict = std::map<std::string, Tensor>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The single-input forward (Sequential's, operator()'s). Modules whose
  // forward takes other arguments declare their own and leave this one.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  // The mean cross-entropy loss straight from inputs and class-index targets,
  // for models whose head fuses it (models/gpt.h: the vocabulary head and the
  // loss in one op, linear_cross_entropy, so the logits never exist whole).
  // Undefined for the others: callers then apply cross_entropy to forward()'s
  // logits, which is what a fused loss must equal.
  virtual Tensor forward_loss(const Tensor& /*input*/, const Tensor& /*targets*/) { return Tensor(); }
  // Turns on activation checkpointing (mt::checkpoint per block or stage:
  // recomputed in backward instead of kept) where the model has it; false
  // for a model with nothing to checkpoint.
  virtual bool enable_activation_checkpointing() { return false; }

  // ---- traversal (registration order, children after own members, dotted names)
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<Tensor> parameters() const;
  // The direct submodules, by name (PyTorch's named_children()).
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  // This module ("") and every module below it, depth first in
  // registration order, with dotted names (PyTorch's named_modules()); a
  // module registered twice is listed once.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<Module*> modules();
  // fn(module) on every submodule and then on this one (PyTorch's apply):
  //   model.apply([](nn::Module& m) { if (auto* l = m.as<nn::Linear>()) nn::init::zeros_(l->bias); });
  void apply(const std::function<void(Module&)>& fn);
  // This module as a T, or nullptr when it is not one.
  template <typename T>
  T* as() {
    return dynamic_cast<T*>(this);
  }
  int64_t parameter_count() const;

  // ---- modes and placement
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Moves parameters and buffers (and their gradients) in place, as PyTorch
  // does: each tensor handle keeps its identity, so an optimizer built
  // before, tied weights and references the user holds follow the move.
  void to(Device device);
  // Casts floating parameters and buffers in place, the same way; norm
  // layers (is_norm_layer) stay f32 when keep_norms_fp32, as AMP's "BN in
  // FP32" rule says.
  void to(DType dtype, bool keep_norms_fp32 = true);
  void half(bool keep_norms_fp32 = true) { to(kF16, keep_norms_fp32); }
  virtual bool is_norm_layer() const { return false; }
  // The (Conv2d, BatchNorm2d) pairs among this module's descendants, dotted
  // names relative to it, where the convolution's output goes to the batch
  // norm and nowhere else: what `mixtape quantize` may fold into one
  // convolution (PyTorch asks its user to list them for fuse_modules; a
  // model lists its own). Only the model knows its data flow, so none by
  // default.
  virtual std::vector<std::pair<std::string, std::string>> conv_batch_norm_pairs() const { return {}; }
  // Pairs of Linear or Conv2d layers among the descendants (dotted names
  // relative to this module) where the first's output reaches the second's
  // input and nothing else, through ops that keep the order of values and
  // map 0 to 0 (ReLU, max-pool, flatten, a folded batch norm), `relu` when
  // a ReLU is among them, given the module's state (a batch norm between
  // them counts only once folded): an INT8 model hands u8 activations from
  // one to the other (amp::int8::chain_int8_layers). Only the model knows
  // its data flow, so none by default.
  struct Int8Handoff {
    std::string from, to;
    bool relu = false;
    bool operator==(const Int8Handoff&) const = default;
  };
  virtual std::vector<Int8Handoff> int8_handoffs() const { return {}; }
  // Buffers that to(dtype) leaves in f32 (an INT8 layer's scales: rounding
  // them to 16 bits would shift every output).
  virtual bool keeps_f32_buffers() const { return false; }

  // ---- state: parameters and buffers by dotted name
  StateDict state_dict() const;
  // strict: every key must match, with the same shape; the dtype converts.
  void load_state_dict(const StateDict& state, bool strict = true);

  // The class's name (mixtape's layers and models say theirs; by default the
  // C++ type's, without its namespaces), as PyTorch prints a module.
  virtual std::string name() const;
  // What the printed tree shows between the parentheses after name()
  // ("in_features=784, out_features=256, bias=true"), as PyTorch's extra_repr.
  virtual std::string extra_repr() const { return ""; }

 protected:
  // Registered tensors are stored by address so to() can replace them in place.
  Tensor& register_parameter(const std::string& name, Tensor& slot, Tensor value);
  Tensor& register_buffer(const std::string& name, Tensor& slot, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  template <typename Fn>
  void visit_tensors(const std::string& prefix, bool parameters, Fn&& fn) const;

  std::vector<std::pair<std::string, Tensor*>> parameters_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Prints the module tree as PyTorch does, each line with its parameter
// count ("# 200,960 parameters"), and the total at the end:
//   std::cout << model;
std::ostream& operator<<(std::ostream& out, const Module& module);

// Names the module whose forward is running, for anomaly mode and the
// autocast dtype report (autograd/module_path.h): a forward that opens with
//   const mt::nn::ForwardScope scope(*this);
// has its ops reported under its dotted path ("blocks.3.attn"), found among
// the children of the module whose forward called it. Every mixtape layer and
// model does; a module without one reports under its caller. When neither
// aid is on it costs one flag test.
class ForwardScope {
 public:
  // Told of every ForwardScope entered and left, on any module (fully
  // sharded data parallel gathers a unit's parameters on entering and frees
  // them on leaving). leaving() runs in a destructor, also while an
  // exception unwinds: it must not throw.
  class Observer {
   public:
    virtual ~Observer() = default;
    virtual void entering(const Module& module) = 0;
    virtual void leaving(const Module& module) noexcept = 0;
  };
  static void add_observer(Observer* observer);
  static void remove_observer(Observer* observer);

  explicit ForwardScope(const Module& module);
  ~ForwardScope();
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;

 private:
  bool pushed_ = false;
  const Module* observed_ = nullptr;
};

}  // namespace mt::nn
