// The tape. Every differentiable op that sees an input requiring grad records
// a Node: its name, a backward function (a closure holding the saved
// tensors), the dtypes its inputs had when it ran, and edges to the nodes
// (or leaf tensors) that produced its inputs. Nodes are numbered in record
// order; backward() runs them in reverse record order (engine.cpp). The
// records themselves are implemented in node.cpp.
#pragma once

#include <atomic>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mt::autograd {

class Node;

// Where an input's gradient goes: another node, a leaf tensor's .grad, or nowhere.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  bool connected() const { return node != nullptr || leaf != nullptr; }
};

// What backward needs to know about an input to shape-check and cast its gradient.
struct InputMeta {
  Shape shape;
  DType dtype;
  Device device;
};

// Given dL/d(output), returns dL/d(input_i) for each input (undefined = zero / not needed).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

// Where a view's gradient lies in its one input's: elements [start, start +
// length) of dim `dim` (a slice with step 1, so each part of a split). Its
// backward function builds the whole gradient (zeros, then the part); the
// engine, when the input came from another node, adds the part where it lies
// into that input's gradient instead: a split into q, k and v no longer
// costs three input-sized zero tensors and two input-sized additions.
struct GradientRegion {
  int64_t dim, start, length;
};

class Node {
 public:
  // `releasable` nodes free their closure after a backward without retain_graph;
  // nodes that save no tensors (views, casts) stay usable, as in PyTorch.
  Node(std::string name, std::vector<Edge> edges, std::vector<InputMeta> inputs, BackwardFn fn, bool releasable = true);

  const std::string& name() const { return name_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  const std::vector<Edge>& next_edges() const { return edges_; }
  const std::vector<InputMeta>& inputs() const { return inputs_; }
  bool released() const { return !fn_; }
  // The module whose forward recorded this node (set only while a debugging
  // aid wants module paths: autograd/module_path.h).
  const std::string& forward_module() const { return forward_module_; }
  void set_forward_module(std::string path) { forward_module_ = std::move(path); }
  // Set by slice on its node (see GradientRegion).
  const std::optional<GradientRegion>& gradient_region() const { return gradient_region_; }
  void set_gradient_region(GradientRegion region) { gradient_region_ = region; }

  // Runs the backward function; gradients come back cast to the dtype each input ran in.
  std::vector<Tensor> apply(const Tensor& grad_output);
  // Frees the saved tensors (after a backward without retain_graph).
  void release() {
    if (releasable_) fn_ = nullptr;
  }

 private:
  std::string name_;
  uint64_t sequence_nr_;
  std::vector<Edge> edges_;
  std::vector<InputMeta> inputs_;
  BackwardFn fn_;
  bool releasable_;
  std::string forward_module_;
  std::optional<GradientRegion> gradient_region_;
};

// A tensor saved for backward, with the storage version it had when saved so
// that an in-place change before backward is an error, not a wrong gradient.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  Tensor get() const;

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
};

inline SavedTensor save(const Tensor& t) { return SavedTensor(t); }

// True when grad mode is on and any input takes part in autograd.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Attaches a node to `output` when needs_grad(inputs); returns output.
// `saves_tensors = false` marks closures that hold only shapes/dtypes (see Node).
// Only ops that compute nothing (views, reshapes, dtype and device moves),
// which autocast never casts, and custom functions (autograd/function.h,
// which apply their declared policy first) call this directly; computing
// ops record through their autocast decision (autograd/autocast.h).
Tensor record_node(const char* name, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn fn,
                   bool saves_tensors = true);

// `t` as `dtype` (itself when it has it): gradients go back in the dtype
// each input ran in.
Tensor cast_to_dtype(const Tensor& t, DType dtype);

// Runs reverse-mode autodiff from `root` (engine.cpp).
void backward(const Tensor& root, const Tensor& gradient, bool retain_graph);

// True inside a backward that started from a GradScaler-scaled loss (so a
// backward nested in a node, as checkpoint's recomputation, marks its leaf
// gradients scaled too).
bool in_loss_scaled_backward();

}  // namespace mt::autograd
