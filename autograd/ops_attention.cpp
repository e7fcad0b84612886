// scaled_dot_product_attention. Two implementations:
// - the reference path: matmul -> mask -> softmax -> dropout -> matmul, each
//   step an existing differentiable op, so its backward is theirs. It runs
//   for f64 and for whatever the fused kernels do not take (saying so once
//   in the log); the fused kernels are tested against it.
// - the fused kernels (kernels/attention/attention.h): the ladder's on SIM
//   and CUDA tensors, cpu.cpp's on the CPU. The T x T scores are never
//   stored; only out and each row's log-sum-exp are saved for backward.
//   MT_ATTENTION=math turns them off. On a GPU (auto) a rung runs only
//   where it has passed its check on that device (kernels/verify/trust.h);
//   elsewhere the reference path serves, with one warning.
#include <spdlog/spdlog.h>

#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/op_helpers.h"
#include "core/graph.h"
#include "kernels/attention/attention.h"

namespace mt {

using autograd::record;
using autograd::save;

namespace {

void check_attention_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  MT_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
           "scaled_dot_product_attention: q, k and v need at least 2 dims ([..., T, D]), got {}, {}, {}",
           q.shape_string(), k.shape_string(), v.shape_string());
  MT_CHECK(q.size(-1) == k.size(-1), "scaled_dot_product_attention: q {} and k {} differ in the head dim",
           q.shape_string(), k.shape_string());
  MT_CHECK(k.size(-2) == v.size(-2), "scaled_dot_product_attention: k {} and v {} differ in the key count",
           k.shape_string(), v.shape_string());
  if (options.enable_gqa) {
    MT_CHECK(q.dim() >= 3 && k.dim() == q.dim() && v.dim() == q.dim() && k.size(-3) == v.size(-3) && k.size(-3) > 0 &&
                 q.size(-3) % k.size(-3) == 0,
             "scaled_dot_product_attention: enable_gqa needs q [..., H, T, D] and k, v [..., H_kv, T, D] with H_kv "
             "dividing H, got q {}, k {}, v {}",
             q.shape_string(), k.shape_string(), v.shape_string());
  }
  autograd::check_floating("scaled_dot_product_attention", q);
  autograd::check_same_device("scaled_dot_product_attention", q, k);
  autograd::check_same_device("scaled_dot_product_attention", q, v);
  MT_CHECK(!(options.is_causal && options.attn_mask.defined()),
           "scaled_dot_product_attention: give either is_causal or attn_mask, not both (as PyTorch)");
  MT_CHECK(options.dropout_p >= 0 && options.dropout_p <= 1,
           "scaled_dot_product_attention: dropout_p must be in [0, 1], got {}", options.dropout_p);
  if (const Tensor& pad = options.key_padding_mask; pad.defined()) {
    MT_CHECK(
        pad.dtype() == kBool && pad.dim() == 2 && pad.size(1) == k.size(-2) && q.dim() >= 3 && pad.size(0) == q.size(0),
        "scaled_dot_product_attention: key_padding_mask must be bool [B, T_k] = [{}, {}], got {} ({})",
        q.dim() >= 3 ? q.size(0) : -1, k.size(-2), pad.shape_string(), pad.dtype());
  }
}

// True where query i may attend key j (j <= i), [T_q, T_k], on `device`.
Tensor build_causal_keep(int64_t queries, int64_t keys, Device device) {
  const Tensor rows = arange(0, static_cast<double>(queries), 1, kF32, device).reshape({queries, 1});
  const Tensor cols = arange(0, static_cast<double>(keys), 1, kF32, device).reshape({1, keys});
  return le(cols, rows);
}

// The causal masks in use, built once per (T_q, T_k, device) and then shared:
// arange is a host-to-device copy on a GPU, which the sync-free step (and a
// CUDA graph capturing it) cannot afford every step. A handful of shapes is
// kept; past that the cache starts again, so it never grows without bound.
Tensor causal_keep(int64_t queries, int64_t keys, Device device) {
  using Key = std::tuple<int64_t, int64_t, std::string>;
  static std::mutex mutex;
  static auto* cache = new std::map<Key, Tensor>();  // never destroyed: device memory outlives exit order
  constexpr size_t kMaxShapes = 16;
  const std::lock_guard<std::mutex> lock(mutex);
  const Key key{queries, keys, device.str()};
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  if (cache->size() >= kMaxShapes) cache->clear();
  NoGradGuard no_grad;
  return cache->emplace(key, build_causal_keep(queries, keys, device)).first->second;
}

// The shape the scores have: q's leading dims, then [Tq, Tk].
Shape scores_shape(const Tensor& q, const Tensor& k) {
  Shape shape = q.sizes();
  shape.back() = k.size(-2);
  return shape;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 1; i <= from.size(); ++i) {
    if (from[from.size() - i] != 1 && from[from.size() - i] != to[to.size() - i]) return false;
  }
  return true;
}

// Why the fused kernels cannot take this call; empty when they can. `mask`
// is the attn_mask as the op uses it (a float one cast with q, k, v).
std::string fused_attention_gap(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool grouped) {
  if (q.dtype() != kF32 && q.dtype() != kF16 && q.dtype() != kBF16) return fmt::format("{} is not fused", q.dtype());
  if (q.dim() != 3 && q.dim() != 4) return fmt::format("q {} is not [B, T, D] or [B, H, T, D]", q.shape_string());
  if (k.dim() != q.dim() || v.dim() != q.dim() || k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
    return "q, k and v differ in rank or dtype";
  }
  if (grouped && q.dim() != 4) return "grouped-query attention is fused for [B, H, T, D] only";
  for (int64_t d = 0; d + 2 < q.dim(); ++d) {
    if (grouped && d == q.dim() - 3) continue;  // fewer K/V heads: the kernels read each for its group
    if (k.size(d) != q.size(d) || v.size(d) != q.size(d)) return "k or v broadcast over q's leading dims";
  }
  if (k.size(-2) == 0 || q.size(-1) == 0 || v.size(-1) == 0) return "an empty key or head dim";
  if (q.size(-1) > kernels::kFusedAttentionMaxHeadDim || v.size(-1) > kernels::kFusedAttentionMaxHeadDim) {
    return fmt::format("head dims above {} are not fused", kernels::kFusedAttentionMaxHeadDim);
  }
  if (mask.defined() && !broadcasts_to(mask.sizes(), scores_shape(q, k))) {
    return fmt::format("attn_mask {} does not broadcast to the scores", mask.shape_string());
  }
  if (mask.defined() && autograd::needs_grad({mask})) {
    return "a float attn_mask that needs a gradient is not fused";
  }
  return "";
}

// Whether k and v have fewer heads than q (enable_gqa).
bool grouped(const Tensor& q, const Tensor& k, const AttentionOptions& options) {
  return options.enable_gqa && k.size(-3) != q.size(-3);
}

// [..., H_kv, T, D] -> [..., H_kv * repeat, T, D], each head `repeat` times in a row (repeat_interleave on dim -3).
Tensor repeat_heads(const Tensor& x, int64_t repeat) {
  if (repeat == 1) return x;
  Shape expanded = x.sizes(), merged = x.sizes();
  expanded.insert(expanded.end() - 2, repeat);
  merged[merged.size() - 3] *= repeat;
  return x.unsqueeze(-3).expand(expanded).reshape(merged);
}

// Logs each distinct reason for leaving the fused kernels once per process.
void say_once_reference_path(const std::string& reason) {
  static std::mutex mutex;
  static std::set<std::string> said;
  const std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(reason).second) {
    spdlog::info("scaled_dot_product_attention: {}; running the reference path (matmul -> softmax -> matmul)", reason);
  }
}

// Dropout inside the fused kernels: the generator advances by what the
// dropout op would draw for the [B, H, Tq, Tk] weights, and the kernels draw
// the same mask from those Philox numbers (forward, and again in backward).
void add_dropout(kernels::AttentionProblem& problem, const AttentionOptions& options) {
  MT_CHECK(!graph_capture_active(),
           "scaled_dot_product_attention: dropout cannot be captured in a CUDA graph yet: its random offset is drawn "
           "on the host, so every replay would repeat one mask");
  const auto weights = static_cast<uint64_t>(problem.batch * problem.heads * problem.q_len * problem.k_len);
  const GeneratorState s =
      (options.generator != nullptr ? *options.generator : default_generator()).reserve((weights + 3) / 4);
  problem.dropout_p = static_cast<float>(options.dropout_p);
  problem.dropout_scale = options.dropout_p < 1 ? static_cast<float>(1.0 / (1.0 - options.dropout_p)) : 0.0f;
  problem.dropout_seed = s.seed;
  problem.dropout_offset = s.offset;
}

// The fused kernels: out and lse forward, the same rung's backward kernels on the tape.
Tensor fused_attention(const autograd::CastInputs& in, const Tensor& mask, const AttentionOptions& options,
                       double scale) {
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  const auto as_heads = [](const Tensor& t) { return t.dim() == 3 ? t.unsqueeze(1) : t; };  // [B, T, D] -> [B, 1, T, D]
  const Tensor q4 = as_heads(q), k4 = as_heads(k), v4 = as_heads(v);
  // The attn_mask as the kernels read it: a [B, H, Tq, Tk] view, bool or f32 (0 strides where it broadcasts).
  Tensor mask4;
  if (mask.defined()) {
    const Tensor typed = mask.dtype() == kBool ? mask : mask.to(kF32);
    mask4 = as_heads(autograd::broadcast_view(typed, scores_shape(q, k)));
  }
  kernels::AttentionProblem problem = kernels::attention_problem(q4, k4, v4, scale, options.is_causal);
  if (options.dropout_p > 0) add_dropout(problem, options);
  const Tensor out = empty({problem.batch, problem.heads, problem.q_len, problem.value_dim}, q.dtype(), q.device());
  const Tensor lse = empty({problem.batch, problem.heads, problem.q_len}, kF32, q.device());
  const Tensor& padding = options.key_padding_mask;
  const kernels::AttentionKernel kernel = kernels::best_attention_kernel(q.dtype(), problem);
  kernels::attention_forward(q4, k4, v4, padding, mask4, problem, kernel, out, lse);
  Shape out_shape = q.sizes();
  out_shape.back() = problem.value_dim;
  const Tensor result = out.reshape(out_shape);
  if (!autograd::needs_grad({q, k, v})) return result;
  // saves: q, k, v, output (compute dtype), lse (f32 per row), the masks given
  // (the caller's attn_mask, or its f32 copy for a 16-bit float mask): O(T)
  // per head beyond the inputs, where the reference path keeps the T x T
  // probabilities.
  return record(
      in, result,
      [sq = save(q4), sk = save(k4), sv = save(v4), so = save(out), slse = save(lse), padding, mask4, problem, kernel,
       q_shape = q.sizes(), k_shape = k.sizes(), v_shape = v.sizes()](const Tensor& g) -> std::vector<Tensor> {
        const Tensor q_ = sq.get(), k_ = sk.get(), v_ = sv.get(), out_ = so.get();
        const Tensor dq = empty(q_.sizes(), q_.dtype(), q_.device());
        const Tensor dk = empty(k_.sizes(), k_.dtype(), k_.device());
        const Tensor dv = empty(v_.sizes(), v_.dtype(), v_.device());
        kernels::attention_backward(q_, k_, v_, padding, mask4, out_, slse.get(), g.reshape(out_.sizes()), problem,
                                    kernel, dq, dk, dv);
        return {dq.reshape(q_shape), dk.reshape(k_shape), dv.reshape(v_shape), Tensor()};
      });
}

// Under MT_ATTENTION=auto: has the rung fused_attention would pick passed
// its check on this device (always true on the CPU and plain sim)?
bool fused_kernel_verified(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  if (q.device().is_cpu()) return true;
  const auto heads = [](const Tensor& t) { return t.dim() == 3 ? t.unsqueeze(1) : t; };
  const kernels::AttentionProblem problem =
      kernels::attention_problem(heads(q), heads(k), heads(v), 1.0, options.is_causal);
  return kernels::attention_kernel_verified(kernels::best_attention_kernel(q.dtype(), problem), q.device());
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const AttentionOptions& options) {
  const Tensor& mask_in = options.attn_mask;
  const bool float_mask = mask_in.defined() && is_floating(mask_in.dtype());
  MT_CHECK(!mask_in.defined() || float_mask || mask_in.dtype() == kBool,
           "scaled_dot_product_attention: attn_mask must be bool or floating, got {}", mask_in.dtype());
  // Autocast decides once for the whole op (a floating mask is cast with q, k, v, as in PyTorch).
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::ScaledDotProductAttention,
                                                            {q_in, k_in, v_in, float_mask ? mask_in : Tensor()});
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  check_attention_inputs(q, k, v, options);
  // The steps inside run in the dtype chosen above (softmax's kernel keeps f32 statistics).
  const amp::Autocast inside(q.device(), amp::autocast_dtype(q.device()), /*enabled=*/false);
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  const kernels::AttentionBackend backend = kernels::attention_backend_from_env();
  if (q.dtype() != kF64 && backend != kernels::AttentionBackend::Math) {
    const Tensor& mask = float_mask ? in[3] : mask_in;
    const std::string gap = fused_attention_gap(q, k, v, mask, grouped(q, k, options));
    if (gap.empty() && (backend == kernels::AttentionBackend::Own || fused_kernel_verified(q, k, v, options))) {
      return fused_attention(in, mask, options, scale);
    }
    if (!gap.empty()) say_once_reference_path(gap);
  }
  // Grouped-query attention on the reference path: each K/V head repeated for its group.
  const int64_t repeat = grouped(q, k, options) ? q.size(-3) / k.size(-3) : 1;
  const Tensor keys = repeat_heads(k, repeat), values = repeat_heads(v, repeat);
  Tensor scores = matmul(mul(q, scale), keys.transpose(-2, -1));
  const Tensor minus_inf = full({}, -INFINITY, scores.dtype(), scores.device());
  if (options.is_causal) scores = where(causal_keep(q.size(-2), k.size(-2), q.device()), scores, minus_inf);
  if (mask_in.defined()) scores = float_mask ? add(scores, in[3]) : where(mask_in, scores, minus_inf);
  if (const Tensor& pad = options.key_padding_mask; pad.defined()) {
    Shape per_batch(static_cast<size_t>(scores.dim()), 1);
    per_batch.front() = pad.size(0);
    per_batch.back() = pad.size(1);
    scores = where(pad.reshape(per_batch), minus_inf, scores);
  }
  Tensor weights = softmax(scores, -1);
  if (options.dropout_p > 0) weights = dropout(weights, options.dropout_p, true, options.generator);
  return matmul(weights, values);
}

}  // namespace mt
