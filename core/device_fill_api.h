// The entry point of core/device_fill.cu (nvcc-safe: plain types only).
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"

MT_CUDA_KERNEL_API(void fill_bits(void* data, std::int64_t count, int element_bytes, std::uint64_t bits,
                                  mt::kernels::Stream stream))
