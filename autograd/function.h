// Custom autograd functions: your own forward and backward, recorded on the
// tape like a built-in op, with an autocast rule like a built-in op's
// (PyTorch's torch::autograd::Function plus torch.amp.custom_fwd):
//
//   struct ScaledTanh : mt::autograd::Function<ScaledTanh> {
//     static constexpr const char* name = "scaled_tanh";
//     // Under autocast the inputs are cast as this policy says before forward
//     // sees them (Fp32: f16/bf16 inputs arrive as f32), as for the built-in
//     // rows of autograd/op_list.h. InputDType (the default) casts nothing.
//     static constexpr mt::amp::CastPolicy autocast = mt::amp::CastPolicy::Fp32;
//     static mt::Tensor forward(mt::autograd::FunctionContext& ctx, const std::vector<mt::Tensor>& in, double k) {
//       mt::Tensor y = mt::tanh(in[0] * k);
//       ctx.save_for_backward({y});
//       ctx.values["k"] = k;
//       return y;
//     }
//     static std::vector<mt::Tensor> backward(mt::autograd::FunctionContext& ctx, const mt::Tensor& g) {
//       const mt::Tensor y = ctx.saved()[0];
//       return {g * (1.0 - y * y) * ctx.values["k"]};
//     }
//   };
//   mt::Tensor y = ScaledTanh::apply({x}, 2.0);
//
// forward runs with gradient recording off (its ops are not taped: the
// function is one node); backward returns one gradient per input (an
// undefined Tensor for an input without one) and runs with recording off.
// Tensors saved with save_for_backward are checked on use: one modified in
// place after it was saved is an mt::Error, as for the built-in ops. The
// function's output may be saved (it is kept without its own node, so no
// reference cycle). Check a new function with mt::gradcheck.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/node.h"

namespace mt::autograd {

class FunctionContext {
 public:
  void save_for_backward(const std::vector<Tensor>& tensors);
  // The saved tensors; an mt::Error if one was modified in place since.
  std::vector<Tensor> saved() const;
  // Whether input i takes part in autograd (PyTorch's needs_input_grad).
  bool needs_input_grad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }
  // Non-tensor values forward hands to backward (PyTorch's ctx.saved_data).
  std::map<std::string, double> values;

 private:
  friend Tensor apply_function(const char*, amp::CastPolicy, const std::vector<Tensor>&,
                               const std::function<Tensor(FunctionContext&, const std::vector<Tensor>&)>&,
                               const std::function<std::vector<Tensor>(FunctionContext&, const Tensor&)>&);
  std::vector<SavedTensor> saved_;
  std::vector<Tensor> pending_;  // saved during forward, before the output's node exists
  std::vector<bool> needs_input_grad_;
};

// Casts `inputs` by `policy` under autocast, runs `forward` without recording,
// and records one tape node whose backward is `backward`.
Tensor apply_function(const char* name, amp::CastPolicy policy, const std::vector<Tensor>& inputs,
                      const std::function<Tensor(FunctionContext&, const std::vector<Tensor>&)>& forward,
                      const std::function<std::vector<Tensor>(FunctionContext&, const Tensor&)>& backward);

template <typename Derived>
struct Function {
  static constexpr amp::CastPolicy autocast = amp::CastPolicy::InputDType;
  static constexpr const char* name = "custom_function";

  template <typename... Args>
  static Tensor apply(const std::vector<Tensor>& inputs, Args&&... args) {
    return apply_function(
        Derived::name, Derived::autocast, inputs,
        [&](FunctionContext& ctx, const std::vector<Tensor>& in) {
          return Derived::forward(ctx, in, std::forward<Args>(args)...);
        },
        [](FunctionContext& ctx, const Tensor& g) { return Derived::backward(ctx, g); });
  }
};

}  // namespace mt::autograd
