// The backward engine: collect the nodes reachable from the root, run them in
// reverse record order (a node is always recorded after the nodes producing
// its inputs, so this is a valid topological order), sum the gradients
// flowing into each node, and accumulate gradients of leaves into .grad.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autocast.h"
#include "autograd/anomaly.h"
#include "autograd/dtype_report.h"
#include "autograd/grad_mode.h"
#include "autograd/hooks.h"
#include "autograd/module_path.h"
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

// ---- where a leaf's first gradient goes (hooks.h: register_grad_destination)

struct Destination {
  uint64_t handle;
  std::weak_ptr<TensorImpl> leaf;
  GradDestination fn;
};
std::mutex hooks_mutex;  // guards the hook and destination tables
std::unordered_map<const TensorImpl*, Destination> grad_destinations;
uint64_t next_hook_handle = 1;

// The tensor registered to receive `leaf`'s gradient, or an undefined one.
Tensor registered_destination(const std::shared_ptr<TensorImpl>& leaf) {
  GradDestination fn;
  {
    const std::lock_guard lock(hooks_mutex);
    if (grad_destinations.empty()) return {};
    auto it = grad_destinations.find(leaf.get());
    if (it == grad_destinations.end() || it->second.leaf.lock() != leaf) return {};
    fn = it->second.fn;
  }
  Tensor into = fn(Tensor(leaf));
  if (!into.defined()) return {};
  MT_CHECK(into.sizes() == leaf->sizes && into.dtype() == leaf->dtype && into.device() == leaf->device &&
               into.is_contiguous(),
           "backward: a gradient destination must be contiguous and match its leaf ({} {} on {}), not {} {} on {}",
           shape_str(leaf->sizes), leaf->dtype, leaf->device.str(), into.shape_string(), into.dtype(),
           into.device().str());
  return into;
}

// `loss_scaled`: the backward started from a GradScaler-scaled loss, so the
// accumulated gradient is scaled too (TensorImpl::loss_scaled).
void accumulate_into_leaf(const std::shared_ptr<TensorImpl>& leaf_ptr, const Tensor& grad, bool loss_scaled) {
  TensorImpl& leaf = *leaf_ptr;
  if (!leaf.grad) {
    // A registered destination (a DDP bucket's slice), or a fresh, contiguous
    // tensor the leaf owns: never alias the graph's buffers.
    Tensor owned = registered_destination(leaf_ptr);
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

// ---- post-accumulate-grad hooks and end-of-backward callbacks (hooks.h)

struct LeafHook {
  uint64_t handle;
  std::weak_ptr<TensorImpl> leaf;
  GradReadyHook fn;
};
std::unordered_map<const TensorImpl*, std::vector<LeafHook>> leaf_hooks;

std::vector<GradReadyHook> hooks_of(const std::shared_ptr<TensorImpl>& leaf) {
  const std::lock_guard lock(hooks_mutex);
  std::vector<GradReadyHook> out;
  auto it = leaf_hooks.find(leaf.get());
  if (it == leaf_hooks.end()) return out;
  for (const LeafHook& h : it->second) {
    if (h.leaf.lock() == leaf) out.push_back(h.fn);  // not a hook of a dead tensor at the same address
  }
  return out;
}

bool any_leaf_hooks() {
  const std::lock_guard lock(hooks_mutex);
  return !leaf_hooks.empty();
}

// Counts, for each hooked leaf, the edges into it from the nodes this
// backward will visit; the leaf's gradient is complete when the last of
// those nodes has run (or been passed over for lack of a gradient).
class GradReadyTracker {
 public:
  GradReadyTracker(const std::vector<Node*>& order) {
    if (!any_leaf_hooks()) return;
    std::unordered_map<TensorImpl*, bool> hooked;
    for (Node* n : order) {
      for (const Edge& e : n->next_edges()) {
        if (!e.leaf) continue;
        auto [known, inserted] = hooked.try_emplace(e.leaf.get(), false);
        if (inserted) known->second = !hooks_of(e.leaf).empty();
        if (known->second) ++uses_[e.leaf.get()];
      }
    }
  }
  void node_done(const Node& n) {
    if (uses_.empty()) return;
    for (const Edge& e : n.next_edges()) {
      if (!e.leaf) continue;
      auto it = uses_.find(e.leaf.get());
      if (it == uses_.end() || --it->second > 0) continue;
      uses_.erase(it);
      run_leaf_hooks(e.leaf);
    }
  }
  static void run_leaf_hooks(const std::shared_ptr<TensorImpl>& leaf) {
    if (!leaf->grad) return;  // no gradient reached it in this backward
    const Tensor t(leaf);
    for (const GradReadyHook& hook : hooks_of(leaf)) hook(t);
  }

 private:
  std::unordered_map<TensorImpl*, int64_t> uses_;
};

thread_local int backward_depth = 0;
thread_local std::vector<std::function<void()>> end_of_backward_callbacks;

// The outermost backward on a thread runs the queued callbacks as it ends
// normally; one that throws drops them.
class BackwardDepth {
 public:
  BackwardDepth() { ++backward_depth; }
  ~BackwardDepth() {
    if (--backward_depth == 0) end_of_backward_callbacks.clear();
  }
  BackwardDepth(const BackwardDepth&) = delete;
  BackwardDepth& operator=(const BackwardDepth&) = delete;
  void finish() {
    if (backward_depth != 1) return;
    // A callback may queue another (it runs too, in order).
    for (size_t i = 0; i < end_of_backward_callbacks.size(); ++i) {
      std::function<void()> fn = std::move(end_of_backward_callbacks[i]);
      fn();
    }
    end_of_backward_callbacks.clear();
  }
};

}  // namespace

uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, GradReadyHook hook) {
  MT_CHECK(leaf.defined() && leaf.requires_grad() && !leaf.grad_fn(),
           "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad");
  MT_CHECK(hook != nullptr, "register_post_accumulate_grad_hook: empty hook");
  const std::lock_guard lock(hooks_mutex);
  const uint64_t handle = next_hook_handle++;
  leaf_hooks[leaf.impl()].push_back({handle, leaf.impl_ptr(), std::move(hook)});
  return handle;
}

uint64_t register_grad_destination(const Tensor& leaf, GradDestination destination) {
  MT_CHECK(leaf.defined() && leaf.requires_grad() && !leaf.grad_fn(),
           "register_grad_destination: the tensor must be a leaf that requires grad");
  MT_CHECK(destination != nullptr, "register_grad_destination: empty function");
  const std::lock_guard lock(hooks_mutex);
  auto it = grad_destinations.find(leaf.impl());
  MT_CHECK(it == grad_destinations.end() || it->second.leaf.expired(),
           "register_grad_destination: this leaf already has a gradient destination (one DDP per parameter)");
  const uint64_t handle = next_hook_handle++;
  grad_destinations[leaf.impl()] = {handle, leaf.impl_ptr(), std::move(destination)};
  return handle;
}

void remove_hook(uint64_t handle) {
  const std::lock_guard lock(hooks_mutex);
  for (auto it = grad_destinations.begin(); it != grad_destinations.end(); ++it) {
    if (it->second.handle != handle) continue;
    grad_destinations.erase(it);
    return;
  }
  for (auto it = leaf_hooks.begin(); it != leaf_hooks.end(); ++it) {
    auto& hooks = it->second;
    const auto found = std::find_if(hooks.begin(), hooks.end(), [&](const LeafHook& h) { return h.handle == handle; });
    if (found == hooks.end()) continue;
    hooks.erase(found);
    if (hooks.empty()) leaf_hooks.erase(it);
    return;
  }
}

void queue_callback(std::function<void()> callback) {
  MT_CHECK(backward_depth > 0, "queue_callback: only inside a backward (from a hook or a backward function)");
  end_of_backward_callbacks.push_back(std::move(callback));
}

namespace {}  // namespace

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

// Nodes that move or reinterpret values without computing: they cannot make
// a NaN or an inf, so anomaly mode does not check them (a dtype cast, "to",
// can overflow f16 and is checked).
static bool is_pure_view(const char* name) {
  static const std::unordered_set<std::string> views{"view",    "permute",   "slice", "expand",
                                                     "squeeze", "unsqueeze", "clone", "to_device"};
  return views.count(name) > 0;
}

// An op neither in the autocast policy table nor one of the tape's own
// views, casts and checkpoints: a user's op recording its node directly.
static bool is_custom_op(const char* name) {
  static const std::unordered_set<std::string> known = [] {
    std::unordered_set<std::string> names{"view",      "permute", "slice", "expand",    "squeeze",
                                          "unsqueeze", "clone",   "to",    "to_device", "checkpoint"};
    for (const amp::PolicyEntry& row : amp::autocast_policy_table()) names.emplace(row.name);
    return names;
  }();
  return known.count(name) == 0;
}

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
  if (module_paths_wanted()) output.impl()->grad_fn->set_forward_module(current_module_path());
  if (AnomalyMode::is_enabled() && !is_pure_view(name)) check_forward_output(name, inputs, output);
  if (DtypeRecorder* recorder = active_dtype_recorder(); recorder != nullptr && is_custom_op(name)) {
    recorder->note(name, "none", inputs, inputs, output);
  }
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
  BackwardDepth depth;
  if (backward_depth == 1) detail::start_backward_check();
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

  std::unordered_map<Node*, Tensor> pending{{root.grad_fn().get(), seed}};
  const std::vector<Node*> order = nodes_in_reverse_record_order(root.grad_fn().get());
  GradReadyTracker ready(order);
  for (Node* node : order) {
    auto it = pending.find(node);
    if (it == pending.end()) {  // reachable only through inputs that got no gradient
      ready.node_done(*node);
      continue;
    }
    const Tensor grad_output = std::move(it->second);
    pending.erase(it);
    std::vector<Tensor> grads = node->apply(grad_output);
    check_backward_gradients(*node, grad_output, grads);
    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = node->next_edges()[i];
      if (!grads[i].defined() || !e.connected()) continue;
      if (e.leaf) {
        accumulate_into_leaf(e.leaf, grads[i], root.impl()->loss_scaled);
        continue;
      }
      auto [slot, inserted] = pending.try_emplace(e.node.get(), grads[i]);
      if (!inserted) slot->second = add_grads(slot->second, grads[i]);
    }
    if (!retain_graph) node->release();
    ready.node_done(*node);
  }
  depth.finish();
}

}  // namespace mt::autograd
