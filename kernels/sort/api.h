// Host entry points of kernels/sort/cuda.cu. The dispatcher
// (kernels/sort/sort.h) hands over a contiguous [rows, cols] input with the
// sorted dim last and a contiguous i64 [rows, k] output.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/tensor_ref.h"

// indices[r, j] = the column of row r's j-th value in sorted order, j < k.
MT_CUDA_KERNEL_API(void sort_rows(const mt::kernels::TensorRef& in, const mt::kernels::TensorRef& indices,
                                  std::int64_t rows, std::int64_t cols, std::int64_t k, bool descending,
                                  mt::kernels::Stream stream))
