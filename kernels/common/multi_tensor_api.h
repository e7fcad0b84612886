// What every multi-tensor kernel (kernels/common/multi_tensor.h: one launch
// over many tensors, cut into chunks) shares with its host entry points.
#pragma once

#include <cstdint>

#include "kernels/common/tensor_ref.h"

namespace mt::kernels {

inline constexpr std::int64_t kMultiTensorChunk = 65536;  // elements per block

}  // namespace mt::kernels
