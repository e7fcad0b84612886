#include "autograd/autocast_cast.h"

#include "autograd/dtype_report.h"

namespace mt::autograd {
namespace {

Tensor cast_with_cache(const Tensor& t, DType dtype) {
  if (!amp::is_castable(t) || t.dtype() == dtype) return t;
  if (!amp::cache_eligible(t)) return t.to(dtype);
  Tensor cached = amp::cached_cast(t, dtype);
  if (cached.defined()) return cached;
  Tensor cast = t.to(dtype);
  amp::store_cached_cast(t, dtype, cast);
  return cast;
}

}  // namespace

CastInputs autocast_inputs(amp::Op op, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> sources = active_dtype_recorder() != nullptr ? inputs : std::vector<Tensor>();
  const std::optional<DType> target = amp::autocast_target(op, inputs);
  if (!target) return CastInputs(op, inputs, std::move(sources));
  std::vector<Tensor> out;
  out.reserve(inputs.size());
  for (const Tensor& t : inputs) out.push_back(cast_with_cache(t, *target));
  return CastInputs(op, std::move(out), std::move(sources));
}

Tensor record(const CastInputs& inputs, const Tensor& output, BackwardFn fn, bool saves_tensors) {
  if (DtypeRecorder* recorder = active_dtype_recorder()) {
    recorder->note(inputs.name(), policy_name(amp::autocast_policy(inputs.op())),
                   inputs.sources().empty() ? inputs.tensors() : inputs.sources(), inputs.tensors(), output);
  }
  return record_node(inputs.name(), output, inputs.tensors(), std::move(fn), saves_tensors);
}

}  // namespace mt::autograd
