#include "autograd/autocast.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>

#include "autograd/dtype_report.h"

namespace mt::amp {
namespace {

constexpr PolicyEntry kPolicy[] = {
#define MT_OP_ROW(op, name, policy, saves) {Op::op, name, CastPolicy::policy, saves},
    MT_AUTOGRAD_OPS(MT_OP_ROW)
#undef MT_OP_ROW
};

const PolicyEntry& entry(Op op) {
  for (const PolicyEntry& e : kPolicy) {
    if (e.op == op) return e;
  }
  fail("autocast: op {} has no policy entry", static_cast<int>(op));
}

// Autocast state per device type: slot 0 = CPU, slot 1 = CUDA (and SIM).
struct DeviceState {
  bool enabled = false;
  DType dtype;
};

struct CacheKey {
  const TensorImpl* impl;
  DType dtype;
  bool operator<(const CacheKey& o) const { return impl != o.impl ? impl < o.impl : dtype < o.dtype; }
};

struct CacheEntry {
  std::weak_ptr<TensorImpl> source;  // detects a freed and reused address
  Tensor cast;
};

struct ThreadState {
  std::array<DeviceState, 2> devices{DeviceState{false, kBF16}, DeviceState{false, kF16}};
  int depth = 0;  // open Autocast regions (enabled or not)
  bool cache_enabled = true;
  std::map<CacheKey, CacheEntry> cache;
};

thread_local ThreadState state;

int slot_of(Device d) { return d.is_cpu() ? 0 : 1; }

}  // namespace

std::span<const PolicyEntry> autocast_policy_table() { return kPolicy; }
CastPolicy autocast_policy(Op op) { return entry(op).policy; }
std::string_view op_name(Op op) { return entry(op).name; }
std::string_view saved_for_backward(Op op) { return entry(op).saves; }

Autocast::Autocast(Device device, DType dtype, bool enabled, bool cache_enabled) : slot_(slot_of(device)) {
  MT_CHECK(!enabled || is_low_precision(dtype), "Autocast: dtype must be f16 or bf16, got {}", dtype);
  DeviceState& s = state.devices[static_cast<size_t>(slot_)];
  previous_enabled_ = s.enabled;
  previous_dtype_ = s.dtype;
  previous_cache_ = state.cache_enabled;
  s.enabled = enabled;
  if (enabled) s.dtype = dtype;
  state.cache_enabled = cache_enabled;
  ++state.depth;
}

Autocast::~Autocast() {
  DeviceState& s = state.devices[static_cast<size_t>(slot_)];
  s.enabled = previous_enabled_;
  s.dtype = previous_dtype_;
  state.cache_enabled = previous_cache_;
  if (--state.depth == 0) state.cache.clear();  // the cache lives as long as the outermost region
}

bool is_autocast_enabled(Device device) { return state.devices[static_cast<size_t>(slot_of(device))].enabled; }
DType autocast_dtype(Device device) { return state.devices[static_cast<size_t>(slot_of(device))].dtype; }
DType default_autocast_dtype(Device device) { return device.is_cpu() ? kBF16 : kF16; }

bool is_castable(const Tensor& t) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != kF64 && is_autocast_enabled(t.device());
}

std::optional<DType> autocast_target(Op op, const std::vector<Tensor>& inputs) {
  return autocast_target(autocast_policy(op), inputs);
}

std::optional<DType> autocast_target(CastPolicy policy, const std::vector<Tensor>& inputs) {
  const Tensor* first = nullptr;
  for (const Tensor& t : inputs) {
    if (is_castable(t)) {
      first = &t;
      break;
    }
  }
  if (first == nullptr) return std::nullopt;
  switch (policy) {
    case CastPolicy::LowerPrecision: return autocast_dtype(first->device());
    case CastPolicy::Fp32: return kF32;
    case CastPolicy::InputDType: return std::nullopt;
    case CastPolicy::Promote: {
      // As PyTorch's result_type: 0-dim inputs count only when no input has dims
      // (f16[4] * f32[] stays f16).
      const bool any_dimensioned =
          std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return is_castable(t) && t.dim() > 0; });
      std::optional<DType> widest;
      for (const Tensor& t : inputs) {
        if (!is_castable(t) || (any_dimensioned && t.dim() == 0)) continue;
        widest = widest ? promote_types(*widest, t.dtype()) : t.dtype();
      }
      return widest ? widest : first->dtype();
    }
  }
  return std::nullopt;
}

bool cache_eligible(const Tensor& t) {
  if (!state.cache_enabled || state.depth == 0) return false;
  // Views are excluded: caching them leaked memory in PyTorch.
  const bool whole_storage = t.offset() == 0 && t.is_contiguous() && t.nbytes() == t.storage()->nbytes();
  return t.dtype() == kF32 && t.is_leaf() && t.requires_grad() && whole_storage;
}

Tensor cached_cast(const Tensor& t, DType dtype) {
  auto it = state.cache.find({t.impl(), dtype});
  if (it == state.cache.end()) return Tensor();
  if (it->second.source.lock().get() != t.impl()) {
    state.cache.erase(it);
    return Tensor();
  }
  return it->second.cast;
}

void store_cached_cast(const Tensor& t, DType dtype, const Tensor& cast) {
  tag_memory(cast, MemoryCategory::AutocastCache);
  state.cache[{t.impl(), dtype}] = {t.impl_ptr(), cast};
}

size_t cache_size() { return state.cache.size(); }

}  // namespace mt::amp

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
  for (const Tensor& t : inputs) {
    MT_CHECK(!t.defined() || !is_fp8(t.dtype()),
             "{}: does not take {} tensors: FP8 data is scaled, so dequantize it (mt::fp8::dequantize) or cast it "
             "with .to() first",
             amp::op_name(op), t.dtype());
  }
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
    recorder->note(inputs.name(), amp::autocast_policy(inputs.op()),
                   inputs.sources().empty() ? inputs.tensors() : inputs.sources(), inputs.tensors(), output);
  }
  return record_node(inputs.name(), output, inputs.tensors(), std::move(fn), saves_tensors);
}

}  // namespace mt::autograd
