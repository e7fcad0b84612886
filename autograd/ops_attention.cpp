// scaled_dot_product_attention, the reference path: matmul -> mask -> softmax
// -> dropout -> matmul, each step an existing differentiable op, so its
// backward is theirs. The fused kernels of the transformer work are tested
// against it.
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "amp/autocast.h"
#include "autograd/autocast_cast.h"
#include "autograd/grad_mode.h"
#include "autograd/op_helpers.h"

namespace mt {
namespace {

void check_attention_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  MT_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
           "scaled_dot_product_attention: q, k and v need at least 2 dims ([..., T, D]), got {}, {}, {}",
           q.shape_string(), k.shape_string(), v.shape_string());
  MT_CHECK(q.size(-1) == k.size(-1), "scaled_dot_product_attention: q {} and k {} differ in the head dim",
           q.shape_string(), k.shape_string());
  MT_CHECK(k.size(-2) == v.size(-2), "scaled_dot_product_attention: k {} and v {} differ in the key count",
           k.shape_string(), v.shape_string());
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
  Tensor scores = matmul(mul(q, scale), k.transpose(-2, -1));
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
  return matmul(weights, v);
}

}  // namespace mt
