// The tables behind hooks.h — post-accumulate-grad hooks, gradient
// destinations, end-of-backward callbacks — and the parts of them the
// engine calls while it walks the tape (detail:: in hooks.h).
#include "autograd/hooks.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "autograd/node.h"

namespace mt::autograd {
namespace {

struct Destination {
  uint64_t handle;
  std::weak_ptr<TensorImpl> leaf;
  GradDestination fn;
};
struct LeafHook {
  uint64_t handle;
  std::weak_ptr<TensorImpl> leaf;
  GradReadyHook fn;
};
std::mutex hooks_mutex;  // guards the hook and destination tables
std::unordered_map<const TensorImpl*, Destination> grad_destinations;
std::unordered_map<const TensorImpl*, std::vector<LeafHook>> leaf_hooks;
std::vector<std::pair<uint64_t, PreNodeHook>> pre_node_hooks;
std::atomic<bool> have_pre_node_hooks{false};
uint64_t next_hook_handle = 1;

thread_local int backward_depth = 0;
thread_local std::vector<std::function<void()>> end_of_backward_callbacks;

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

uint64_t register_pre_node_hook(PreNodeHook hook) {
  MT_CHECK(hook != nullptr, "register_pre_node_hook: empty hook");
  const std::lock_guard lock(hooks_mutex);
  const uint64_t handle = next_hook_handle++;
  pre_node_hooks.emplace_back(handle, std::move(hook));
  have_pre_node_hooks = true;
  return handle;
}

void remove_hook(uint64_t handle) {
  const std::lock_guard lock(hooks_mutex);
  const auto pre =
      std::find_if(pre_node_hooks.begin(), pre_node_hooks.end(), [&](const auto& h) { return h.first == handle; });
  if (pre != pre_node_hooks.end()) {
    pre_node_hooks.erase(pre);
    have_pre_node_hooks = !pre_node_hooks.empty();
    return;
  }
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

namespace detail {

void run_pre_node_hooks(const Node& node) {
  if (!have_pre_node_hooks) return;
  std::vector<PreNodeHook> hooks;
  {
    const std::lock_guard lock(hooks_mutex);
    for (const auto& [handle, fn] : pre_node_hooks) hooks.push_back(fn);
  }
  for (const PreNodeHook& hook : hooks) hook(node);
}

Tensor registered_grad_destination(const std::shared_ptr<TensorImpl>& leaf) {
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

GradReadyTracker::GradReadyTracker(const std::vector<Node*>& order) {
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

void GradReadyTracker::node_done(const Node& n) {
  if (uses_.empty()) return;
  for (const Edge& e : n.next_edges()) {
    if (!e.leaf) continue;
    auto it = uses_.find(e.leaf.get());
    if (it == uses_.end() || --it->second > 0) continue;
    uses_.erase(it);
    run_leaf_hooks(e.leaf);
  }
}

void GradReadyTracker::run_leaf_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  if (!leaf->grad) return;  // no gradient reached it in this backward
  const Tensor t(leaf);
  for (const GradReadyHook& hook : hooks_of(leaf)) hook(t);
}

BackwardDepth::BackwardDepth() { ++backward_depth; }

BackwardDepth::~BackwardDepth() {
  if (--backward_depth == 0) end_of_backward_callbacks.clear();
}

bool BackwardDepth::outermost() const { return backward_depth == 1; }

void BackwardDepth::finish() {
  if (backward_depth != 1) return;
  // A callback may queue another (it runs too, in order).
  for (size_t i = 0; i < end_of_backward_callbacks.size(); ++i) {
    std::function<void()> fn = std::move(end_of_backward_callbacks[i]);
    fn();
  }
  end_of_backward_callbacks.clear();
}

}  // namespace detail
}  // namespace mt::autograd
