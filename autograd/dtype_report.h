// The autocast dtype report: which dtype each op ran in, per module.
//
//   mt::autograd::DtypeRecorder recorder;      // or `mixtape train --dtype-report`
//   loss = model.forward(x);                   // under mt::amp::Autocast
//   for (auto& row : recorder.rows()) ...      // module, op, inputs, compute, output, calls, flag
//
// Every op that records a tape node while the recorder lives adds a call to
// its row (rows are keyed by module path, op and dtypes, in first-call
// order). Under autocast a row is flagged when an activation stayed f32 in
// an op that would have taken f16/bf16: a Promote op (add, mul, ...) pulled
// up to f32 by an f32 operand, an input-dtype op (relu, dropout, ...) handed
// an f32 activation, or a custom op with no autocast policy (it recorded its
// node directly). Such activations are saved for backward at 4 bytes an
// element: the usual reason AMP saves less memory than expected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "core/tensor.h"

namespace mt::autograd {

struct DtypeReportRow {
  std::string module;   // dotted path, "(model)" at the top level
  std::string op;       // the policy row's name (or a custom op's)
  std::string policy;   // lower_precision | fp32 | promote | input_dtype | none (custom)
  std::string inputs;   // the floating inputs' dtypes before autocast, e.g. "f32 act, f32 param"
  std::string compute;  // the dtype the op ran in
  std::string output;
  int64_t calls = 0;
  std::string flag;  // why an f32 activation stayed f32 ("" when nothing is wrong)
  std::string fp8;   // inside an FP8 region: why this Linear did not run FP8 ("" otherwise)
};

class DtypeRecorder {
 public:
  DtypeRecorder();
  ~DtypeRecorder();
  DtypeRecorder(const DtypeRecorder&) = delete;
  DtypeRecorder& operator=(const DtypeRecorder&) = delete;
  const std::vector<DtypeReportRow>& rows() const { return rows_; }

  // Called for each recorded op: by autocast.cpp for ops with a policy row,
  // by node.cpp for those without one (no policy: the row says "none").
  void note(const std::string& op, std::optional<amp::CastPolicy> policy, const std::vector<Tensor>& sources,
            const std::vector<Tensor>& cast, const Tensor& output);
  // Called by an op that an FP8 region left in high precision, after it
  // recorded `output`: the row of that call gets `why`.
  void note_not_fp8(const Tensor& output, const std::string& why);

 private:
  std::vector<DtypeReportRow> rows_;
  const TensorImpl* last_output_ = nullptr;  // the output the last note() was for, and its row
  size_t last_row_ = 0;
  DtypeRecorder* previous_;
};

// The recorder active on this thread, or null.
DtypeRecorder* active_dtype_recorder();

// "lower_precision", "fp32", "promote" or "input_dtype".
const char* policy_name(amp::CastPolicy policy);

}  // namespace mt::autograd
