#include "autograd/function.h"

#include <memory>

#include "autograd/grad_mode.h"

namespace mt::autograd {

void FunctionContext::save_for_backward(const std::vector<Tensor>& tensors) {
  pending_.insert(pending_.end(), tensors.begin(), tensors.end());
}

std::vector<Tensor> FunctionContext::saved() const {
  std::vector<Tensor> out;
  out.reserve(saved_.size());
  for (const SavedTensor& s : saved_) out.push_back(s.get());
  return out;
}

Tensor apply_function(const char* name, amp::CastPolicy policy, const std::vector<Tensor>& inputs,
                      const std::function<Tensor(FunctionContext&, const std::vector<Tensor>&)>& forward,
                      const std::function<std::vector<Tensor>(FunctionContext&, const Tensor&)>& backward) {
  // The cast nodes are ordinary to(dtype) nodes: gradients reach each input in its own dtype.
  std::vector<Tensor> cast = inputs;
  if (const std::optional<DType> target = amp::autocast_target(policy, inputs)) {
    for (Tensor& t : cast) {
      if (amp::is_castable(t)) t = t.to(*target);
    }
  }
  auto ctx = std::make_shared<FunctionContext>();
  for (const Tensor& t : cast) ctx->needs_input_grad_.push_back(t.defined() && t.requires_grad());
  Tensor out;
  {
    const NoGradGuard no_grad;
    out = forward(*ctx, cast);
  }
  MT_CHECK(out.defined(), "{}: forward returned an undefined tensor", name);
  // SavedTensor keeps a handle without the node, so a saved output is no reference cycle.
  for (const Tensor& t : ctx->pending_) ctx->saved_.emplace_back(t);
  ctx->pending_.clear();
  if (!needs_grad(cast)) return out;
  const size_t count = cast.size();
  return record_node(name, out, cast, [ctx, backward, count, name](const Tensor& g) {
    std::vector<Tensor> grads = backward(*ctx, g);
    MT_CHECK(grads.size() == count, "{}: backward returned {} gradients for {} inputs", name, grads.size(), count);
    return grads;
  });
}

}  // namespace mt::autograd
