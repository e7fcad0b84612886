#include "autograd/dtype_report.h"

#include <algorithm>

#include "autograd/module_path.h"

namespace mt::autograd {
namespace {
thread_local DtypeRecorder* active = nullptr;

bool is_parameter(const Tensor& t) { return t.requires_grad() && !t.grad_fn(); }

std::string dtype_list(const std::vector<Tensor>& tensors) {
  std::string text;
  for (const Tensor& t : tensors) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {}", t.dtype(), is_parameter(t) ? "param" : "act");
  }
  return text;
}

// The dtype the op computed in: that of its first floating (cast) input.
std::string compute_dtype(const std::vector<Tensor>& cast, const Tensor& output) {
  for (const Tensor& t : cast) {
    if (t.defined() && is_floating(t.dtype())) return fmt::format("{}", t.dtype());
  }
  return fmt::format("{}", output.dtype());
}

std::string why_f32(std::optional<amp::CastPolicy> policy, const std::vector<Tensor>& sources, const Tensor& output) {
  if (!output.defined() || output.dtype() != kF32 || !amp::is_autocast_enabled(output.device())) return "";
  if (policy == amp::CastPolicy::Fp32 || policy == amp::CastPolicy::LowerPrecision) return "";
  const bool f32_activation = std::any_of(sources.begin(), sources.end(), [](const Tensor& t) {
    return t.defined() && t.dtype() == kF32 && !is_parameter(t);
  });
  const bool f32_parameter = std::any_of(sources.begin(), sources.end(), [](const Tensor& t) {
    return t.defined() && t.dtype() == kF32 && is_parameter(t);
  });
  if (!policy) return "f32 activation: a custom op with no autocast policy kept it f32";
  if (policy == amp::CastPolicy::Promote && f32_parameter && !f32_activation)
    return "f32 activation: an f32 parameter promoted this op to f32";
  if (f32_activation) return "f32 activation: its input arrived in f32 (see the op before it)";
  return "";
}

}  // namespace

DtypeRecorder::DtypeRecorder() : previous_(active) {
  active = this;
  detail::add_module_path_user(1);
}

DtypeRecorder::~DtypeRecorder() {
  detail::add_module_path_user(-1);
  active = previous_;
}

DtypeRecorder* active_dtype_recorder() { return active; }

const char* policy_name(amp::CastPolicy policy) {
  switch (policy) {
    case amp::CastPolicy::LowerPrecision: return "lower_precision";
    case amp::CastPolicy::Fp32: return "fp32";
    case amp::CastPolicy::Promote: return "promote";
    case amp::CastPolicy::InputDType: return "input_dtype";
  }
  return "?";
}

void DtypeRecorder::note(const std::string& op, std::optional<amp::CastPolicy> policy,
                         const std::vector<Tensor>& sources, const std::vector<Tensor>& cast, const Tensor& output) {
  DtypeReportRow row{module_path_for_display(current_module_path()),
                     op,
                     policy ? policy_name(*policy) : "none",
                     dtype_list(sources),
                     compute_dtype(cast, output),
                     output.defined() ? fmt::format("{}", output.dtype()) : "-",
                     1,
                     why_f32(policy, sources, output)};
  auto same = [&](const DtypeReportRow& r) {
    return r.module == row.module && r.op == row.op && r.inputs == row.inputs && r.compute == row.compute &&
           r.output == row.output;
  };
  auto it = std::find_if(rows_.begin(), rows_.end(), same);
  if (it != rows_.end()) {
    ++it->calls;
  } else {
    it = rows_.insert(rows_.end(), std::move(row));
  }
  last_output_ = output.defined() ? output.impl() : nullptr;
  last_row_ = static_cast<size_t>(it - rows_.begin());
}

void DtypeRecorder::note_not_fp8(const Tensor& output, const std::string& why) {
  // Only when `output` is what the last note() was for: an op that recorded no node has no row.
  if (!why.empty() && output.defined() && output.impl() == last_output_) rows_[last_row_].fp8 = why;
}

}  // namespace mt::autograd
