// The backward engine: collect the nodes reachable from the root, run them in
// reverse record order (a node is always recorded after the nodes producing
// its inputs, so this is a valid topological order), sum the gradients
// flowing into each node, and accumulate gradients of leaves into .grad.
// The tape's records are in node.cpp, the hook tables in hooks.cpp.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autograd/anomaly.h"
#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/hooks.h"
#include "autograd/node.h"
#include "kernels/elementwise/elementwise.h"

namespace mt::autograd {
namespace {

using detail::BackwardDepth;
using detail::GradReadyTracker;

Tensor add_grads(const Tensor& a, const Tensor& b) {
  Tensor out = empty(a.sizes(), a.dtype(), a.device());
  kernels::binary(kernels::BinaryOp::Add, a, b, out);
  return out;
}

// The gradient summed so far for a node's output. `owned`: the engine made
// the tensor (a sum or a region's zeros), so adding into it in place touches
// nothing else; a gradient as a node returned it may alias that node's
// grad_output or be a broadcast view.
struct PendingGrad {
  Tensor grad;
  bool owned = false;
};
using Pending = std::unordered_map<Node*, PendingGrad>;

// A node with a gradient region whose input came from another node: its
// part of the gradient added where it lies into that node's pending
// gradient (created as zeros by the first part). False where the node's own
// backward must run (a leaf input, or no region).
bool add_into_region(Node& node, const Tensor& grad_output, Pending& pending) {
  const std::optional<GradientRegion>& region = node.gradient_region();
  if (!region || node.next_edges().size() != 1 || !node.next_edges()[0].node) return false;
  const InputMeta& input = node.inputs()[0];
  const Tensor part = cast_to_dtype(grad_output, input.dtype);  // as Node::apply casts
  check_backward_gradients(node, grad_output, {part});
  auto [slot, inserted] = pending.try_emplace(node.next_edges()[0].node.get());
  PendingGrad& sum = slot->second;
  if (inserted) {
    sum = {zeros(input.shape, input.dtype, grad_output.device()), true};
  } else if (!sum.owned) {
    Tensor copy = empty(sum.grad.sizes(), sum.grad.dtype(), sum.grad.device());
    kernels::copy(sum.grad, copy);
    sum = {copy, true};
  }
  const Tensor where = sum.grad.narrow(region->dim, region->start, region->length);
  MT_CHECK(where.sizes() == part.sizes(), "{} backward: gradient has shape {}, its region {}", node.name(),
           part.shape_string(), where.shape_string());
  kernels::binary(kernels::BinaryOp::Add, where, part, where);
  return true;
}

// `loss_scaled`: the backward started from a GradScaler-scaled loss, so the
// accumulated gradient is scaled too (TensorImpl::loss_scaled).
void accumulate_into_leaf(const std::shared_ptr<TensorImpl>& leaf_ptr, const Tensor& grad, bool loss_scaled) {
  TensorImpl& leaf = *leaf_ptr;
  if (!leaf.grad) {
    // A registered destination (a DDP bucket's slice), or a fresh, contiguous
    // tensor the leaf owns: never alias the graph's buffers.
    Tensor owned = detail::registered_grad_destination(leaf_ptr);
    if (!owned.defined()) {
      owned = empty(leaf.sizes, leaf.dtype, leaf.device);
      tag_memory(owned, MemoryCategory::Gradients);
    }
    kernels::copy(grad, owned);
    leaf.grad = owned.impl_ptr();
    leaf.grad->loss_scaled = loss_scaled;
    return;
  }
  if (loss_scaled) leaf.grad->loss_scaled = true;
  Tensor existing(leaf.grad);
  MT_CHECK(existing.sizes() == grad.sizes(), "backward: accumulated gradient has shape {} but .grad has shape {}",
           grad.shape_string(), existing.shape_string());
  kernels::binary(kernels::BinaryOp::Add, existing, grad, existing);  // in place: optimizers keep the same .grad
}

std::vector<Node*> nodes_in_reverse_record_order(Node* root) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen{root};
  std::vector<Node*> stack{root};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const Edge& e : n->next_edges()) {
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  std::sort(order.begin(), order.end(), [](Node* a, Node* b) { return a->sequence_nr() > b->sequence_nr(); });
  return order;
}

thread_local bool loss_scaled_backward = false;

// Marks the thread as inside a scaled (or unscaled) backward for as long as it lives.
class LossScaledScope {
 public:
  explicit LossScaledScope(bool scaled) : previous_(loss_scaled_backward) { loss_scaled_backward = scaled; }
  ~LossScaledScope() { loss_scaled_backward = previous_; }

 private:
  bool previous_;
};

}  // namespace

bool in_loss_scaled_backward() { return loss_scaled_backward; }

void backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  MT_CHECK(root.requires_grad() || root.grad_fn(),
           "backward: the tensor (shape {}) does not require grad and has no grad_fn; did you forget "
           "requires_grad_() on the parameters, or compute it under NoGradGuard?",
           root.shape_string());
  Tensor seed = gradient;
  if (!seed.defined()) {
    MT_CHECK(root.numel() == 1,
             "backward: the gradient can only be implied for a scalar output, but the output has shape {}; pass a "
             "gradient of that shape",
             root.shape_string());
    seed = ones(root.sizes(), root.dtype(), root.device());
  }
  MT_CHECK(seed.sizes() == root.sizes(), "backward: gradient shape {} does not match output shape {}",
           seed.shape_string(), root.shape_string());
  seed = cast_to_dtype(seed, root.dtype());

  NoGradGuard no_grad;  // backward formulas are not themselves recorded
  const LossScaledScope scaled(root.impl()->loss_scaled);
  BackwardDepth depth;
  if (depth.outermost()) detail::start_backward_check();
  // Backward runs in the dtypes the forward chose (the tape keeps them): the
  // ops inside the backward formulas must not be cast again.
  const amp::Autocast no_host_autocast(kCPU, kBF16, /*enabled=*/false);
  const amp::Autocast no_device_autocast(kSIM, kF16, /*enabled=*/false);
  if (!root.grad_fn()) {
    accumulate_into_leaf(root.impl_ptr(), seed, root.impl()->loss_scaled);
    GradReadyTracker::run_leaf_hooks(root.impl_ptr());
    depth.finish();
    return;
  }

  Pending pending{{root.grad_fn().get(), PendingGrad{seed, false}}};
  const std::vector<Node*> order = nodes_in_reverse_record_order(root.grad_fn().get());
  GradReadyTracker ready(order);
  for (Node* node : order) {
    auto it = pending.find(node);
    if (it == pending.end()) {  // reachable only through inputs that got no gradient
      ready.node_done(*node);
      continue;
    }
    const Tensor grad_output = std::move(it->second.grad);
    pending.erase(it);
    detail::run_pre_node_hooks(*node);
    if (add_into_region(*node, grad_output, pending)) {
      ready.node_done(*node);  // a view's node: nothing saved to release
      continue;
    }
    std::vector<Tensor> grads = node->apply(grad_output);
    check_backward_gradients(*node, grad_output, grads);
    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = node->next_edges()[i];
      if (!grads[i].defined() || !e.connected()) continue;
      if (e.leaf) {
        accumulate_into_leaf(e.leaf, grads[i], root.impl()->loss_scaled);
        continue;
      }
      auto [slot, inserted] = pending.try_emplace(e.node.get(), PendingGrad{grads[i], false});
      if (!inserted) slot->second = {add_grads(slot->second.grad, grads[i]), true};
    }
    if (!retain_graph) node->release();
    ready.node_done(*node);
  }
  depth.finish();
}

}  // namespace mt::autograd
