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
#pragma once

#include <vector>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/tensor.h"

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
