// Autocast: which dtype each op computes in, decided when the op is recorded.
//
//   mt::amp::Autocast guard(mt::kCPU, mt::kBF16);   // or (mt::kCUDA, mt::kF16)
//   auto logits = model.forward(x);                 // linear/matmul run in bf16
//   auto loss = mt::cross_entropy(logits, y);       // losses run in f32
//
// The state is thread-local and nestable; Autocast(device, dtype, false) opens
// a region that must stay f32. Each op asks autocast_target() for the dtype
// its floating inputs should be cast to; the op casts, runs, and its tape node
// keeps the dtypes it ran in, so backward never re-decides.
//
// The policy mirrors PyTorch's lists (autocast_policy_table(), one row per op of
// autograd/op_list.h, which also says what each op saves for backward), and every
// differentiable op that computes has a row: an op records its tape node only
// through the inputs autocast decided for it (autograd/autocast.h), so
// an op cannot exist without a policy entry.
//   LowerPrecision  matmul-like ops, where Tensor Cores give the speed
//   Fp32            ops whose range or accumulation needs f32: exp/log/pow,
//                   softmax, norms, losses, reductions
//   Promote         ops mixing inputs: every floating input goes to the
//                   widest input type (f32 if any input is f32), so the
//                   kernel sees one dtype
//   InputDType      nothing is cast: the op runs in its input's dtype, as
//                   PyTorch runs every op it does not list (activations,
//                   pools, indexing, dropout). batch_norm is the notable
//                   row: it takes f16/bf16 activations with its f32 weight,
//                   bias and running statistics, computes the statistics and
//                   the normalisation in f32 and returns the input's dtype —
//                   as PyTorch (cuDNN) does. Casting its input to f32 instead
//                   would keep an f32 copy of every activation and add a cast
//                   back before the next convolution.
// Only floating, non-f64 tensors on the autocast device are ever cast.
// Ops that compute nothing (views, reshapes, dtype and device moves) have no
// row: autocast never casts them. Backward never re-decides: the engine runs
// it with autocast off, in the dtypes the forward ran in.
#pragma once

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "autograd/node.h"
#include "autograd/op_list.h"
#include "core/tensor.h"

namespace mt::amp {

enum class CastPolicy { LowerPrecision, Fp32, Promote, InputDType };

// One id per row of autograd/op_list.h, in its order.
enum class Op {
#define MT_OP_ENUM(op, name, policy, saves) op,
  MT_AUTOGRAD_OPS(MT_OP_ENUM)
#undef MT_OP_ENUM
};

struct PolicyEntry {
  Op op;
  std::string_view name;
  CastPolicy policy;
  std::string_view saves;  // what the op's backward keeps alive (op_list.h's last column)
};

// The whole policy, one row per op, generated from autograd/op_list.h.
std::span<const PolicyEntry> autocast_policy_table();
CastPolicy autocast_policy(Op op);
std::string_view op_name(Op op);
// The saved-reads table: the tensors op's backward rule keeps alive, in words
// ("output (f32)", "input, weight (compute dtype)", "nothing (input shape only)").
std::string_view saved_for_backward(Op op);

// RAII autocast region for one device type (SIM counts as CUDA: it runs the
// CUDA code path). Low-precision dtype: F16 or BF16.
class Autocast {
 public:
  Autocast(Device device, DType dtype, bool enabled = true, bool cache_enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  int slot_;
  bool previous_enabled_;
  DType previous_dtype_;
  bool previous_cache_;
};

bool is_autocast_enabled(Device device);
DType autocast_dtype(Device device);
// The default low-precision dtype of a device, as in PyTorch: f16 on CUDA, bf16 on the CPU.
DType default_autocast_dtype(Device device);

// The dtype `op`'s floating inputs should be cast to under the current
// autocast state, or nullopt when autocast is off for their device.
std::optional<DType> autocast_target(Op op, const std::vector<Tensor>& inputs);
// The same for a policy rather than a row (custom functions: autograd/function.h).
std::optional<DType> autocast_target(CastPolicy policy, const std::vector<Tensor>& inputs);
// True when autocast may cast `t` (floating, not f64, on an autocast device).
bool is_castable(const Tensor& t);

// ---- weight-cast cache: each f32 leaf parameter is cast once per outermost region.
// Returns the cached cast of `t` to `dtype`, or an undefined tensor.
Tensor cached_cast(const Tensor& t, DType dtype);
void store_cached_cast(const Tensor& t, DType dtype, const Tensor& cast);
// True when `t` qualifies: caching on, f32 leaf that requires grad, not a view.
bool cache_eligible(const Tensor& t);
size_t cache_size();  // for tests and diagnostics

}  // namespace mt::amp

// Applying the autocast policy inside ops, and the one way a computing op
// records its tape node.
//
// An op hands its floating inputs to autocast_inputs() with its policy row
// (amp::Op); the result holds the inputs cast to the dtype
// amp::autocast_target() picks (through the weight-cast cache) and the row
// itself. record() takes that result, not a name and a list of tensors, so an
// op that skips its policy cannot record a node: it does not compile. The
// casts are ordinary `to(dtype)` tape nodes, so gradients flow back in each
// input's original dtype.
namespace mt::autograd {

// An op's inputs as autocast decided them, with the op's policy row.
class CastInputs {
 public:
  amp::Op op() const { return op_; }
  const char* name() const { return amp::op_name(op_).data(); }  // the table's names are literals
  const std::vector<Tensor>& tensors() const { return tensors_; }
  // The inputs as the op was given them, before any cast; kept only while a
  // DtypeRecorder is active (autograd/dtype_report.h), else empty.
  const std::vector<Tensor>& sources() const { return sources_; }
  const Tensor& operator[](size_t i) const { return tensors_.at(i); }
  size_t size() const { return tensors_.size(); }

 private:
  CastInputs(amp::Op op, std::vector<Tensor> tensors, std::vector<Tensor> sources)
      : op_(op), tensors_(std::move(tensors)), sources_(std::move(sources)) {}
  friend CastInputs autocast_inputs(amp::Op op, const std::vector<Tensor>& inputs);
  amp::Op op_;
  std::vector<Tensor> tensors_;
  std::vector<Tensor> sources_;
};

// The inputs cast for `op` (unchanged when autocast is off or the policy needs nothing).
CastInputs autocast_inputs(amp::Op op, const std::vector<Tensor>& inputs);

// Attaches the op's node to `output` when its inputs need a gradient;
// returns output. The node is named after the policy row. Anomaly mode
// checks the output here, and a DtypeRecorder notes the op's dtypes.
Tensor record(const CastInputs& inputs, const Tensor& output, BackwardFn fn, bool saves_tensors = true);

}  // namespace mt::autograd
