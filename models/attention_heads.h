// The reshapes around multi-head attention, shared by the transformer models.
#pragma once

#include <vector>

#include "autograd/ops.h"

namespace mt::models {

// The keys and values of the positions a decoder has seen, one pair per
// block, each [B, kv heads, positions, head_dim].
struct KvCache {
  std::vector<Tensor> keys, values;
  int64_t length() const { return keys.empty() || !keys.front().defined() ? 0 : keys.front().size(2); }
  void clear() {
    keys.clear();
    values.clear();
  }
  // Sized for a model of `layers` blocks on first use; an mt::Error when it
  // already holds another model's (`model` names it in the message).
  void fit(size_t layers, const char* model) {
    if (keys.size() == layers) return;
    MT_CHECK(keys.empty(), "{}: a key/value cache of {} layers does not fit a model of {}", model, keys.size(),
             layers);
    keys.resize(layers);
    values.resize(layers);
  }
};

// What new queries at positions past .. past + t - 1 may attend: the keys
// at positions up to their own, out of past + t ([t, past + t], bool).
// (PyTorch's is_causal aligns the mask to the top left, which is right only
// when there is no past.)
inline Tensor causal_keep_after(int64_t past, int64_t t, Device device) {
  std::vector<double> keep(static_cast<size_t>(t * (past + t)));
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < past + t; ++j) keep[static_cast<size_t>(i * (past + t) + j)] = j <= past + i;
  }
  return from_vector(keep, {t, past + t}, kBool, device);
}

// The attention options of queries continuing `past` cached positions with `t` new ones.
inline AttentionOptions causal_after(int64_t past, int64_t t, Device device) {
  AttentionOptions options;
  if (past == 0) {
    options.is_causal = true;
  } else if (t > 1) {
    options.attn_mask = causal_keep_after(past, t, device);
  }  // one new query may attend every key: no mask
  return options;
}

// [B, T, C] -> [B, heads, T, C / heads] (a view where the layout allows).
inline Tensor split_heads(const Tensor& x, int64_t heads) {
  return x.reshape({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

// [B, heads, T, D] -> [B, T, heads * D].
inline Tensor merge_heads(const Tensor& y) {
  return y.transpose(1, 2).reshape({y.size(0), y.size(2), y.size(1) * y.size(3)});
}

}  // namespace mt::models
