// The tape's records: a Node and its backward call, tensors saved for
// backward, and record_node, which attaches a node to an op's output.
#include "autograd/node.h"

#include <algorithm>
#include <unordered_set>

#include "autograd/anomaly.h"
#include "autograd/autocast.h"
#include "autograd/dtype_report.h"
#include "autograd/grad_mode.h"
#include "autograd/module_path.h"
#include "autograd/op_list.h"
#include "kernels/elementwise/elementwise.h"

namespace mt::autograd {
namespace {

std::atomic<uint64_t> sequence_counter{0};

}  // namespace

uint64_t next_sequence_nr() { return sequence_counter.load(); }

Tensor cast_to_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.sizes(), dtype, t.device());
  kernels::copy(t, out);
  return out;
}

Node::Node(std::string name, std::vector<Edge> edges, std::vector<InputMeta> inputs, BackwardFn fn, bool releasable)
    : name_(std::move(name)),
      sequence_nr_(sequence_counter.fetch_add(1)),
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
    grads[i] = cast_to_dtype(grads[i], inputs_[i].dtype);  // backward runs in the dtypes recorded at forward time
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

// Nodes that move or reinterpret values without computing (op_list.h's
// MT_TAPE_OPS rows marked moves_only): they cannot make a NaN or an inf, so
// anomaly mode does not check them.
static bool is_pure_view(const char* name) {
  static const std::unordered_set<std::string> views = [] {
    std::unordered_set<std::string> names;
#define MT_TAPE_OP_IF_MOVES(op_name, moves_only) \
  if (moves_only) names.emplace(op_name);
    MT_TAPE_OPS(MT_TAPE_OP_IF_MOVES)
#undef MT_TAPE_OP_IF_MOVES
    return names;
  }();
  return views.count(name) > 0;
}

// An op neither in the autocast policy table nor one of the tape's own
// nodes (MT_TAPE_OPS): a user's op recording its node directly.
static bool is_custom_op(const char* name) {
  static const std::unordered_set<std::string> known = [] {
    std::unordered_set<std::string> names;
#define MT_TAPE_OP_NAME(op_name, moves_only) names.emplace(op_name);
    MT_TAPE_OPS(MT_TAPE_OP_NAME)
#undef MT_TAPE_OP_NAME
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
    recorder->note(name, std::nullopt, inputs, inputs, output);
  }
  output.impl()->requires_grad = true;
  return output;
}

}  // namespace mt::autograd
