// The reshapes around multi-head attention, shared by the transformer models.
#pragma once

#include "autograd/ops.h"

namespace mt::models {

// [B, T, C] -> [B, heads, T, C / heads] (a view where the layout allows).
inline Tensor split_heads(const Tensor& x, int64_t heads) {
  return x.reshape({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

// [B, heads, T, D] -> [B, T, heads * D].
inline Tensor merge_heads(const Tensor& y) {
  return y.transpose(1, 2).reshape({y.size(0), y.size(2), y.size(1) * y.size(3)});
}

}  // namespace mt::models
