// Device fill: the kernel behind zeros/ones/full on CUDA and sim tensors.
//
// What: `count` contiguous elements of 1, 2, 4 or 8 bytes each set to one bit
// pattern. The host turns the value into the dtype's bits (round to nearest
// even for f16/bf16, exactly as a cast would), so the kernel knows nothing
// about dtypes and takes the pattern by value: a fill is one launch, with no
// host-built buffer and no blocking copy, and so can be captured in a CUDA
// graph. It lives in core because core's factories need it; it uses only the
// launch helper.
//
// Bound: memory bandwidth (a store per element, grid-stride loop).
// cuda_compat.h (via launch.h) comes first: it defines __host__/__device__ for the simulator build.
#include "runtime/launch.h"

#include "core/device_fill_api.h"

namespace mt::MT_KERNEL_NS {

template <typename Word>
__global__ void fill_bits_kernel(Word* data, std::int64_t count, Word bits) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    data[i] = bits;
  }
}

template <typename Word>
void launch_fill(void* data, std::int64_t count, std::uint64_t bits, Stream stream) {
  constexpr int kThreads = 256;
  const std::int64_t wanted = (count + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 1024 ? wanted : 1024);
  launch("fill_bits_kernel", fill_bits_kernel<Word>, dim3(blocks), dim3(kThreads), 0, stream,
         static_cast<Word*>(data), count, static_cast<Word>(bits));
}

void fill_bits(void* data, std::int64_t count, int element_bytes, std::uint64_t bits, Stream stream) {
  if (count <= 0) return;
  switch (element_bytes) {
    case 1: return launch_fill<std::uint8_t>(data, count, bits, stream);
    case 2: return launch_fill<std::uint16_t>(data, count, bits, stream);
    case 4: return launch_fill<std::uint32_t>(data, count, bits, stream);
    default: return launch_fill<std::uint64_t>(data, count, bits, stream);
  }
}

}  // namespace mt::MT_KERNEL_NS
