// Host entry points of kernels/cuda/reduce.cu. op: the mt::kernels::ReduceOp value.
#pragma once

#include <cstdint>

#include "kernels/cuda/kernel_api.h"
#include "kernels/cuda/tensor_ref.h"

MT_CUDA_KERNEL_API(void reduce_rows(int op, const mt::kernels::TensorRef& in, const mt::kernels::TensorRef& out,
                                    std::int64_t rows, std::int64_t cols, double correction,
                                    mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void reduce_rows_with_index(bool is_max, const mt::kernels::TensorRef& in,
                                               const mt::kernels::TensorRef& values,
                                               const mt::kernels::TensorRef& indices, std::int64_t rows,
                                               std::int64_t cols, mt::kernels::Stream stream))
