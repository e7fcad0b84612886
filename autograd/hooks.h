// Hooks into the backward engine, as PyTorch has them:
//
//  * a post-accumulate-grad hook on a leaf runs once per backward, right after
//    the leaf's .grad has received the last contribution that backward will
//    make to it (PyTorch's Tensor.register_post_accumulate_grad_hook). Data
//    parallel training uses it to start all-reducing a gradient bucket while
//    the rest of backward still runs;
//  * a gradient destination says where a leaf's .grad is to live when
//    backward finds the leaf without one: backward writes the first
//    contribution straight into it (PyTorch DDP's gradient_as_bucket_view,
//    which saves the copy into the bucket and the gradient's own memory);
//  * a pre-node hook runs just before every node's backward function
//    (PyTorch's Node.register_prehook, on every node at once): fully
//    sharded data parallel gathers a unit's parameters before the first
//    node its forward recorded runs (nodes are told apart by sequence_nr);
//  * queue_callback runs a function when the outermost backward in progress
//    on this thread finishes (PyTorch's Variable._execution_engine.queue_callback),
//    so that work a hook started can be waited for before backward() returns.
//
// Without hooks the engine does no extra work.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace mt::autograd {

class Node;

using GradReadyHook = std::function<void(const Tensor& leaf)>;

// `leaf` must require grad and have no grad_fn. Returns a handle for remove_hook.
// A leaf that gets no gradient in a backward does not call its hooks.
uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, GradReadyHook hook);
void remove_hook(uint64_t handle);  // a hook's or a destination's handle

// `destination(leaf)` returns a contiguous tensor of the leaf's shape, dtype
// and device (or an undefined one: a fresh tensor, as without it). One per
// leaf; returns a handle for remove_hook.
using GradDestination = std::function<Tensor(const Tensor& leaf)>;
uint64_t register_grad_destination(const Tensor& leaf, GradDestination destination);

// Runs before each node's backward function, in every backward on any
// thread, until removed (remove_hook).
using PreNodeHook = std::function<void(const Node& node)>;
uint64_t register_pre_node_hook(PreNodeHook hook);

// The sequence number the next recorded node gets: the nodes recorded
// between two reads have numbers in [first read, second read).
uint64_t next_sequence_nr();

// Only inside a backward (from a hook or a node's backward function).
void queue_callback(std::function<void()> callback);

// What the engine (engine.cpp) asks of the hook tables while it walks the tape.
namespace detail {

// Runs the pre-node hooks (nothing when there are none).
void run_pre_node_hooks(const Node& node);

// The tensor registered to receive `leaf`'s first gradient, or an undefined one.
Tensor registered_grad_destination(const std::shared_ptr<TensorImpl>& leaf);

// Counts, for each hooked leaf, the edges into it from the nodes this
// backward will visit; the leaf's gradient is complete when the last of
// those nodes has run (or been passed over for lack of a gradient).
class GradReadyTracker {
 public:
  explicit GradReadyTracker(const std::vector<Node*>& order);
  void node_done(const Node& n);
  static void run_leaf_hooks(const std::shared_ptr<TensorImpl>& leaf);

 private:
  std::unordered_map<TensorImpl*, int64_t> uses_;
};

// The outermost backward on a thread runs the queued callbacks as it ends
// normally (finish()); one that throws drops them.
class BackwardDepth {
 public:
  BackwardDepth();
  ~BackwardDepth();
  BackwardDepth(const BackwardDepth&) = delete;
  BackwardDepth& operator=(const BackwardDepth&) = delete;
  bool outermost() const;
  void finish();
};

}  // namespace detail
}  // namespace mt::autograd
