// The backward engine: collect the nodes reachable from the root, run them in
// reverse record order (a node is always recorded after the nodes producing
// its inputs, so this is a valid topological order), sum the gradients
// flowing into each node, and accumulate gradients of leaves into .grad.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "kernels/elementwise.h"

namespace mt::autograd {
namespace {

std::atomic<uint64_t> next_sequence_nr{0};

Tensor cast_to(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.sizes(), dtype, t.device());
  kernels::copy(t, out);
  return out;
}

Tensor add_grads(const Tensor& a, const Tensor& b) {
  Tensor out = empty(a.sizes(), a.dtype(), a.device());
  kernels::binary(kernels::BinaryOp::Add, a, b, out);
  return out;
}

// `loss_scaled`: the backward started from a GradScaler-scaled loss, so the
// accumulated gradient is scaled too (TensorImpl::loss_scaled).
void accumulate_into_leaf(TensorImpl& leaf, const Tensor& grad, bool loss_scaled) {
  if (!leaf.grad) {
    // A fresh, contiguous tensor the leaf owns: never alias the graph's buffers.
    Tensor owned = empty(leaf.sizes, leaf.dtype, leaf.device);
    kernels::copy(grad, owned);
    tag_memory(owned, MemoryCategory::Gradients);
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

}  // namespace

Node::Node(std::string name, std::vector<Edge> edges, std::vector<InputMeta> inputs, BackwardFn fn, bool releasable)
    : name_(std::move(name)),
      sequence_nr_(next_sequence_nr.fetch_add(1)),
      edges_(std::move(edges)),
      inputs_(std::move(inputs)),
      fn_(std::move(fn)),
      releasable_(releasable) {}

std::vector<Tensor> Node::apply(const Tensor& grad_output) {
  MT_CHECK(fn_ != nullptr,
           "{} backward: trying to backward through the graph a second time (its saved tensors were freed after the "
           "first backward); pass retain_graph=true to the first backward() if you need to",
           name_);
  std::vector<Tensor> grads = fn_(grad_output);
  MT_CHECK(grads.size() == inputs_.size(), "{} backward returned {} gradients for {} inputs", name_, grads.size(),
           inputs_.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    MT_CHECK(grads[i].sizes() == inputs_[i].shape, "{} backward: gradient {} has shape {}, expected {}", name_, i,
             grads[i].shape_string(), shape_str(inputs_[i].shape));
    grads[i] = cast_to(grads[i], inputs_[i].dtype);  // backward runs in the dtypes recorded at forward time
  }
  return grads;
}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  tensor_ = t.detach();  // no grad_fn: a saved output must not keep its own node alive (cycle)
  version_ = t.storage()->version();
  tag_memory_if_other(t, MemoryCategory::Activations);  // a saved weight stays a parameter
}

Tensor SavedTensor::get() const {
  if (tensor_.defined()) {
    MT_CHECK(tensor_.storage()->version() == version_,
             "backward: a tensor saved for backward (shape {}, {}) was modified in place after it was saved "
             "(version {} -> {}); clone it before modifying",
             tensor_.shape_string(), tensor_.dtype(), version_, tensor_.storage()->version());
  }
  return tensor_;
}

namespace {
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

static bool takes_part(const Tensor& t) { return t.defined() && (t.requires_grad() || t.grad_fn() != nullptr); }

bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!GradMode::is_enabled()) return false;
  return std::any_of(inputs.begin(), inputs.end(), takes_part);
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  return std::any_of(inputs.begin(), inputs.end(), takes_part);
}

Tensor record_node(const char* name, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn fn,
                   bool saves_tensors) {
  if (!needs_grad(inputs)) return output;
  std::vector<Edge> edges;
  std::vector<InputMeta> metas;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined() && t.grad_fn()) {
      e.node = t.grad_fn();
    } else if (t.defined() && t.requires_grad()) {
      e.leaf = t.impl_ptr();
    }
    edges.push_back(std::move(e));
    metas.push_back(t.defined() ? InputMeta{t.sizes(), t.dtype(), t.device()} : InputMeta{{}, kF32, kCPU});
  }
  output.impl()->grad_fn =
      std::make_shared<Node>(name, std::move(edges), std::move(metas), std::move(fn), saves_tensors);
  output.impl()->requires_grad = true;
  return output;
}

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
  seed = cast_to(seed, root.dtype());

  NoGradGuard no_grad;  // backward formulas are not themselves recorded
  const LossScaledScope scaled(root.impl()->loss_scaled);
  // Backward runs in the dtypes the forward chose (the tape keeps them): the
  // ops inside the backward formulas must not be cast again.
  const amp::Autocast no_host_autocast(kCPU, kBF16, /*enabled=*/false);
  const amp::Autocast no_device_autocast(kSIM, kF16, /*enabled=*/false);
  if (!root.grad_fn()) {
    accumulate_into_leaf(*root.impl(), seed, root.impl()->loss_scaled);
    return;
  }

  std::unordered_map<Node*, Tensor> pending{{root.grad_fn().get(), seed}};
  const std::vector<Node*> order = nodes_in_reverse_record_order(root.grad_fn().get());
  for (Node* node : order) {
    auto it = pending.find(node);
    if (it == pending.end()) continue;  // reachable only through inputs that got no gradient
    const Tensor grad_output = std::move(it->second);
    pending.erase(it);
    std::vector<Tensor> grads = node->apply(grad_output);
    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = node->next_edges()[i];
      if (!grads[i].defined() || !e.connected()) continue;
      if (e.leaf) {
        accumulate_into_leaf(*e.leaf, grads[i], root.impl()->loss_scaled);
        continue;
      }
      auto [slot, inserted] = pending.try_emplace(e.node.get(), grads[i]);
      if (!inserted) slot->second = add_grads(slot->second, grads[i]);
    }
    if (!retain_graph) node->release();
  }
}

}  // namespace mt::autograd
