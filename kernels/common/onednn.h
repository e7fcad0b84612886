// oneDNN, the CPU back end for GEMM and convolution: the engine, a stream
// per thread, a cache of primitives, and buffers in a primitive's layout.
// Included only by the families' onednn files (built when CMake found
// oneDNN: MT_WITH_ONEDNN).
//
// oneDNN is the library PyTorch's CPU path runs its GEMMs and convolutions
// through; it picks its kernels at run time for the CPU it finds (AVX2,
// AVX-512, AVX512-BF16's vdpbf16ps, AMX), so the build stays x86-64-v3 and a
// BF16 product is native where the CPU has the instruction.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <vector>

#include "core/host_scratch.h"
#include "core/tensor.h"

namespace mt::kernels::onednn {

// The process's CPU engine.
const dnnl::engine& engine();

// The calling thread's in-order stream on it (oneDNN primitives may run from
// several threads at once, each with its own stream).
dnnl::stream& stream();

// The oneDNN data type of a mixtape dtype it computes in (f32, bf16), or none.
std::optional<dnnl::memory::data_type> data_type(DType dtype);

// The dtype oneDNN computes tensors of `dtype` in: f16 widened to f32
// (oneDNN 2.6's f16 kernels need AVX512-FP16; the widening is exact and the
// result is rounded once into f16, the arithmetic of the Eigen path, which
// was 2x slower), every other dtype itself.
DType compute_dtype(DType dtype);

// What a primitive depends on, as one key: the caller's integers (thread
// count, geometry) followed by its memory descriptors.
using PrimitiveKey = std::vector<int64_t>;
void append(PrimitiveKey& key, const dnnl::memory::desc& md);

// Primitives (or anything made from their descriptors) made so far, by key;
// an empty optional records a case oneDNN declined, so it is not asked again.
// Creating a primitive descriptor walks oneDNN's implementation list, which
// costs more than a small product, so it happens once per shape.
template <typename Entry>
class PrimitiveCache {
 public:
  template <typename Make>
  std::optional<Entry> get(const PrimitiveKey& key, Make make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = cache_.find(key);
    if (found != cache_.end()) return found->second;
    if (cache_.size() >= kMaxEntries) cache_.clear();  // a shape-changing workload: start again
    return cache_.emplace(key, make()).first->second;
  }

 private:
  static constexpr size_t kMaxEntries = 4096;
  std::mutex mutex_;
  std::map<PrimitiveKey, std::optional<Entry>> cache_;
};

// True when oneDNN could only offer its reference implementation, which is
// slower than mixtape's own Eigen path: the caller declines the case.
bool is_reference(const dnnl::primitive_desc_base& pd);

// A tensor's data as a primitive wants it laid out. When the primitive chose
// the tensor's own (plain) layout this is the tensor's memory; otherwise it
// is a scratch buffer from the host cache: an input is reordered into it on
// construction, an output is reordered back by commit(). NCHW <-> nChw16c
// (and nChw8c) are copied by kernels/common/channel_blocks.h, 3-4x faster
// than oneDNN's reorder of them; every other pair by oneDNN's reorder.
class LayoutBuffer {
 public:
  // An input: `data` laid out as `plain`, read in layout `wanted`.
  static LayoutBuffer input(const dnnl::memory::desc& plain, const void* data, const dnnl::memory::desc& wanted);
  // An output: written in layout `wanted`, then commit() into `data`, laid out as `plain`.
  static LayoutBuffer output(const dnnl::memory::desc& plain, void* data, const dnnl::memory::desc& wanted);
  // Memory already laid out as `md` (read only; nothing to commit).
  static LayoutBuffer view(const dnnl::memory::desc& md, const void* data);

  const dnnl::memory& memory() const { return memory_; }
  void commit();

 private:
  LayoutBuffer(const dnnl::memory::desc& plain, void* data, const dnnl::memory::desc& wanted);

  HostScratch<std::byte> scratch_;
  dnnl::memory plain_, memory_;
};

}  // namespace mt::kernels::onednn
