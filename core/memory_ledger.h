// Where the memory goes: every tensor's storage is filed under a category,
// and each device keeps current and peak bytes per category.
//
// A storage is born in the category of the MemoryCategoryScope active on its
// thread (Other when none) and is re-filed by the layer that learns what it
// is: nn files parameters and buffers, the autograd engine the gradients it
// writes into .grad and the tensors a backward node saves, autocast its
// weight-cast cache, the FP8 Linear the FP8 tensors it saves and delayed
// scaling its histories, the optimizers their state and master weights, the
// trainer its batches, kernels their workspaces. Re-filing moves the bytes
// between categories, so the totals stay exact.
//
// Besides each category's own peak, the ledger remembers the breakdown at
// the moment the total peaked: that is the answer to "what filled memory at
// the worst point of the step". Bytes are what tensors asked for; a caching
// allocator's rounding, cache and fragmentation show as reserved_unused.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/device.h"

namespace mt {

class Storage;
class Tensor;

enum class MemoryCategory : uint8_t {
  Parameters,      // the model's parameters and buffers
  MasterWeights,   // f32 copies of f16/bf16 parameters kept by the optimizer
  Gradients,       // .grad of leaves
  OptimizerState,  // Adam's moments, SGD's momentum, step counts
  Activations,     // tensors saved for backward
  AutocastCache,   // autocast's low-precision copies of weights
  Fp8Activations,  // FP8 inputs an FP8 Linear saves for backward, with their scales
  Fp8WeightCasts,  // FP8 copies of weights an FP8 Linear saves, with their scales
  Fp8State,        // delayed scaling's amax histories and scales
  Workspace,       // scratch of cuBLASLt, cuDNN and mixtape's own kernels
  Data,            // batches (and their staging buffers)
  Other,           // everything else: temporaries, outputs, gradients in flight
};
inline constexpr int kMemoryCategories = 12;
const char* memory_category_name(MemoryCategory category);

struct MemoryLedger {
  using Bytes = std::array<int64_t, kMemoryCategories>;
  Bytes current{};  // live bytes per category
  Bytes peak{};     // each category's own peak since the last reset
  Bytes at_peak{};  // the categories when the total last peaked
  int64_t total_current = 0;
  int64_t total_peak = 0;
  // A caching allocator's reserved bytes that no tensor holds (its cache,
  // rounding and fragmentation); 0 for the plain CPU allocator.
  int64_t reserved_unused = 0;

  int64_t operator[](MemoryCategory c) const { return current[static_cast<size_t>(c)]; }
};

// The ledger of `device` now.
MemoryLedger memory_ledger(Device device = kCPU);
// Starts the peaks (per category and the total's breakdown) from now.
void reset_memory_ledger_peak(Device device = kCPU);

// Files t's storage under `category` (no-op for an undefined tensor).
void tag_memory(const Tensor& t, MemoryCategory category);
// The same, only while the storage is still Other: a parameter saved for
// backward stays a parameter.
void tag_memory_if_other(const Tensor& t, MemoryCategory category);

// Storages allocated on this thread while a scope lives start in `category`.
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

namespace detail {
// The book-keeping Storage does (core/tensor.cpp).
class DeviceLedger;
DeviceLedger& ledger_for(Device device);
MemoryCategory scope_category();
void ledger_add(DeviceLedger& ledger, MemoryCategory category, int64_t bytes);
void ledger_remove(DeviceLedger& ledger, MemoryCategory category, int64_t bytes);
}  // namespace detail

}  // namespace mt
