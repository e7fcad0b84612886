#include "tools/train/memory_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <numeric>

namespace mt::tools {

std::array<MemoryCategory, kMemoryCategories> all_memory_categories() {
  std::array<MemoryCategory, kMemoryCategories> all{};
  for (int i = 0; i < kMemoryCategories; ++i) all[static_cast<size_t>(i)] = static_cast<MemoryCategory>(i);
  return all;
}

namespace {

// Bytes of one per-element state tensor over n values of an optimizer
// parameter of `numel` elements whose plain state has `plain_size` bytes per
// value (`kept`: its state stays plain).
double state_tensor_bytes(const OptimizerStateTheory& state, int64_t numel, bool kept, double n, int64_t plain_size) {
  if (kept) return n * static_cast<double>(plain_size);
  switch (state.dtype) {
    case optim::StateDtype::F32: return n * static_cast<double>(plain_size);
    case optim::StateDtype::BF16: return n * 2;
    case optim::StateDtype::Int8:
      if (numel < state.min_quantized_numel) return n * static_cast<double>(plain_size);
      return n + 4 * std::ceil(n / static_cast<double>(state.block));  // a byte each, an f32 absmax per block
  }
  return 0;
}

double state_tensor_bytes(const OptimizerStateTheory& state, const Tensor& p, double n, int64_t plain_size) {
  const bool kept = p.dtype() == kF64 || std::any_of(state.kept_f32.begin(), state.kept_f32.end(),
                                                     [&](const Tensor& k) { return k.is_same(p); });
  return state_tensor_bytes(state, p.numel(), kept, n, plain_size);
}

// The state over this rank's parts of `layout`, each part stored as its
// whole parameter's state would be (dist::make_shard_optimizer), with a
// step each; `plain_size(param)`: bytes per value of its plain state.
int64_t shard_state_bytes(const dist::ShardLayout& layout, const OptimizerStateTheory& state,
                          const std::function<int64_t(size_t)>& plain_size) {
  int64_t bytes = 0;
  for (const dist::ShardLayout::Part& part : layout.parts()) {
    const double one = state_tensor_bytes(state, shape_numel(layout.shape(part.param)),
                                          layout.keeps_f32_state(part.param) || layout.dtype(part.param) == kF64,
                                          static_cast<double>(part.length), plain_size(part.param));
    bytes += static_cast<int64_t>(state.tensors * one) + 4;
  }
  return bytes;
}

int64_t buffer_bytes(const nn::Module& model) {
  int64_t bytes = 0;
  for (const auto& [name, b] : model.named_buffers())
    bytes += b.numel() * static_cast<int64_t>(element_size(b.dtype()));
  return bytes;
}

}  // namespace

MemoryTheory memory_theory(const nn::Module& model, bool master_weights, const OptimizerStateTheory& state,
                           DataParallelLayout layout) {
  MemoryTheory t;
  const bool sharded = layout.shard_optimizer;
  const double share = sharded ? 1.0 / layout.world : 1.0;  // of the state this rank keeps
  const dist::ShardLayout* parts = sharded ? layout.shards : nullptr;  // counted exactly below
  int64_t elements = 0;
  bool device_codes = false;  // 8-bit state off the CPU keeps its 2 KiB code table there
  for (const auto& [name, p] : model.named_parameters()) {
    const int64_t n = p.numel();
    elements += n;
    const auto s = static_cast<int64_t>(element_size(p.dtype()));
    const bool has_master = master_weights && is_low_precision(p.dtype());
    t.parameters += n * s;
    if (!(layout.ddp && p.dtype() == kF32)) t.gradients += n * s;  // else the bucket holds it
    const int64_t plain_size = p.dtype() == kF32 || has_master ? 4 : s;
    const double one_tensor = state_tensor_bytes(state, p, static_cast<double>(n) * share, plain_size);
    if (parts == nullptr) {
      if (has_master) t.master_weights += static_cast<int64_t>(4.0 * n * share);
      t.optimizer_state += static_cast<int64_t>(state.tensors * one_tensor) + 4;
    }
    device_codes = device_codes || (state.dtype == optim::StateDtype::Int8 && !p.device().is_cpu() &&
                                    one_tensor < static_cast<double>(n) * share * static_cast<double>(plain_size));
    if (sharded && p.dtype() != kF32) t.gradients += static_cast<int64_t>(n * s * share);  // the shard's copies
  }
  if (parts != nullptr) {
    const auto has_master = [&](size_t i) { return master_weights && is_low_precision(parts->dtype(i)); };
    for (const dist::ShardLayout::Part& part : parts->parts()) {
      if (has_master(part.param)) t.master_weights += 4 * part.length;
    }
    t.optimizer_state += shard_state_bytes(*parts, state, [&](size_t i) {
      return parts->dtype(i) == kF32 || has_master(i) ? int64_t{4} : static_cast<int64_t>(element_size(parts->dtype(i)));
    });
  }
  if (device_codes && state.tensors > 0) t.optimizer_state += 2 * kernels::kCodeEntries * 4;
  if (layout.ddp || sharded) {
    t.gradients += 4 * elements;  // DDP's f32 buckets, or ZeRO's f32 flat buffer
    if (sharded) t.gradients += 4 * ((elements + layout.world - 1) / layout.world);  // and its shard
  }
  t.parameters += buffer_bytes(model);
  return t;
}

MemoryTheory fsdp_memory_theory(const dist::FullyShardedDataParallel& fsdp, const OptimizerStateTheory& state,
                                bool accumulates) {
  const dist::ShardLayout& layout = fsdp.layout();
  const nn::Module& model = fsdp.module();
  const std::vector<Tensor> params = model.parameters();
  const int64_t param_size = static_cast<int64_t>(element_size(params.front().dtype()));  // as gathered
  const int64_t reduce_size = static_cast<int64_t>(element_size(fsdp.reduce_dtype()));
  const int64_t ranks = layout.ranks();
  MemoryTheory t;
  t.parameters = 4 * layout.shard_elements() + buffer_bytes(model);
  t.gradients = 4 * layout.shard_elements();
  t.optimizer_state = shard_state_bytes(layout, state, [](size_t) { return int64_t{4}; });  // of the f32 shards
  // The units' whole sizes; the root is the last.
  std::vector<int64_t> whole;
  for (const dist::ShardLayout::Unit& unit : layout.units()) whole.push_back(unit.shard * ranks);
  const int64_t root = whole.back();
  std::vector<int64_t> others(whole.begin(), whole.end() - 1);
  std::sort(others.rbegin(), others.rend());
  int64_t two_largest = 0;
  for (size_t i = 0; i < std::min<size_t>(2, others.size()); ++i) two_largest += others[i];
  const int64_t largest = std::max(others.empty() ? int64_t{0} : others.front(), root);
  // Gathering in another dtype than the f32 shards sends a cast copy of this
  // rank's shard: at most two at once (one waited for, one prefetched).
  if (param_size != 4) t.parameters += 2 * param_size * ((largest + ranks - 1) / ranks);
  if (fsdp.strategy() == dist::ShardingStrategy::Full) {
    t.parameters += param_size * (root + two_largest);
  } else {
    t.parameters += param_size * std::accumulate(whole.begin(), whole.end(), int64_t{0});
  }
  // The root's buffer and two units'; accumulating, at most their reduced
  // shards besides (the first backward of a step reduces into the shard gradients).
  const int64_t buffers = root + two_largest;
  t.gradients += buffers * reduce_size;
  if (accumulates) t.gradients += (buffers / ranks + 3) * reduce_size;
  if (reduce_size != param_size) t.gradients += largest * param_size;  // backward's own, copied into the buffer
  return t;
}

int64_t theory_bytes(const MemoryTheory& theory, MemoryCategory category) {
  switch (category) {
    case MemoryCategory::Parameters: return theory.parameters;
    case MemoryCategory::Gradients: return theory.gradients;
    case MemoryCategory::MasterWeights: return theory.master_weights;
    case MemoryCategory::OptimizerState: return theory.optimizer_state;
    case MemoryCategory::Fp8Activations: return theory.fp8_activations;
    case MemoryCategory::Fp8WeightCasts: return theory.fp8_weight_casts;
    case MemoryCategory::Fp8State: return theory.fp8_state;
    default: return -1;
  }
}

namespace {

std::string mib(int64_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

void print_memory_report(std::FILE* out, const MemoryLedger& ledger, const MemoryTheory& theory,
                         const std::string& device) {
  std::fprintf(out, "memory on %s at its peak (%s in tensors):\n", device.c_str(), mib(ledger.total_peak).c_str());
  std::fprintf(out, "  %-16s %12s %8s %12s %12s\n", "category", "at the peak", "share", "own peak", "theory");
  for (MemoryCategory c : all_memory_categories()) {
    const auto i = static_cast<size_t>(c);
    const int64_t theory_figure = theory_bytes(theory, c);
    if (theory_figure < 0 && ledger.peak[i] == 0) continue;
    const double share = ledger.total_peak > 0
                             ? 100.0 * static_cast<double>(ledger.at_peak[i]) / static_cast<double>(ledger.total_peak)
                             : 0.0;
    std::fprintf(out, "  %-16s %12s %7.1f%% %12s %12s\n", memory_category_name(c), mib(ledger.at_peak[i]).c_str(),
                 share, mib(ledger.peak[i]).c_str(), theory_figure < 0 ? "-" : mib(theory_figure).c_str());
  }
  if (ledger.reserved_unused > 0) {
    std::fprintf(out, "  and %s reserved by the caching allocator but held by no tensor (now)\n",
                 mib(ledger.reserved_unused).c_str());
  }
}

nlohmann::json memory_report_json(const MemoryLedger& ledger, const MemoryTheory& theory) {
  nlohmann::json at_peak, peak, predicted;
  for (MemoryCategory c : all_memory_categories()) {
    const auto i = static_cast<size_t>(c);
    at_peak[memory_category_name(c)] = ledger.at_peak[i];
    peak[memory_category_name(c)] = ledger.peak[i];
    if (const int64_t t = theory_bytes(theory, c); t >= 0) predicted[memory_category_name(c)] = t;
  }
  return {{"total_peak", ledger.total_peak},
          {"reserved_unused", ledger.reserved_unused},
          {"at_peak", at_peak},
          {"peak", peak},
          {"theory", predicted}};
}

}  // namespace mt::tools
