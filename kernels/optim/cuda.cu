// Fused optimizer kernels (AdamW, SGD) and the two halves of gradient-norm
// clipping (sum of squares, scale by the clip coefficient), all multi-tensor.
//
// What: one launch updates many parameters: read the gradient (any dtype),
// multiply by inv_scale, update the f32 master weight (or the parameter
// itself) and the f32 moments with the shared per-element math of
// kernels/optim/math.h, then write the low-precision parameter copy —
// rounded to nearest, or stochastically for bf16. Every block first reads
// found_inf on the device: non-zero means the scaler saw inf/NaN, and the
// block returns without touching anything. The per-parameter step counters
// are advanced by a tiny kernel that runs first (same stream, same found_inf
// test), so the update kernel reads the new t without any grid-wide sync.
//
// Algorithm: multi_tensor_apply (multi_tensor.h), 65536-element chunks, a
// slot table of 24 parameters and 160 chunks per launch in the kernel
// argument. sum_of_squares writes one partial per chunk and a one-block
// kernel adds the partials in a fixed order — deterministic, unlike
// atomicAdd. scale_by_clip_coefficient computes min(1, max_norm / (norm +
// 1e-6)) from the device-side norm in every block.
//
// Precision: all optimizer arithmetic in f32 (the coefficient in f64, then
// f32, exactly as on the CPU); the parameter is rounded once. The moments
// are stored f32, BF16 (stochastic rounding) or 8-bit block-wise
// (state_format.h); the 8-bit path holds one state block in registers
// between its update and its requantization.
// The sum of squares accumulates in f32 (the CPU reference in f64).
//
// Bound: memory bandwidth — AdamW with f32 master, two f32 moments and
// bf16 param/grad moves 16 bytes read + 14 written per parameter; with
// 8-bit moments 10 read + 8 written. Measured
// speed: not yet measured on a GPU.
#include "runtime/launch.h"

#include "core/philox.h"
#include "kernels/optim/math.h"
#include "kernels/elementwise/loop.h"
#include "kernels/optim/api.h"
#include "kernels/common/multi_tensor.h"
#include "kernels/common/block_reduce.h"
#include "kernels/optim/state_format.h"

namespace mt::MT_KERNEL_NS {

using kernels::OptimSlotRef;

namespace {

constexpr int kSlots = 20;  // the table travels in the kernel argument (4 KiB at most)
constexpr int kSlotBlocks = 160;
constexpr int kStepThreads = 128;

struct SlotTable {
  OptimSlotRef slot[kSlots];
  ChunkTable<kSlots, kSlotBlocks> chunks;
};

static_assert(sizeof(SlotTable) + 256 <= 4096, "the slot table must fit CUDA's kernel parameter space");

struct StepTable {
  float* step[kStepThreads];
  int count = 0;
};

__device__ __forceinline__ bool skipped(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

// Writes the updated f32 weight back: into the master and the parameter copy, or into the parameter.
__device__ __forceinline__ void write_weight(const OptimSlotRef& s, std::int64_t i, float w, float step) {
  if (s.master == nullptr) {
    store_as<float>(s.param, s.param_dtype, i, w);
    return;
  }
  s.master[i] = w;
  if (s.stochastic_bf16) {
    const std::uint32_t bits =
        philox4x32_10(kernels::param_rounding_key(s.rounding_key), kernels::param_rounding_block(step, i)).word[i % 4];
    static_cast<std::uint16_t*>(s.param)[i] = kernels::f32_to_bf16_stochastic(w, bits);
  } else {
    store_as<float>(s.param, s.param_dtype, i, w);
  }
}

__device__ __forceinline__ float read_weight(const OptimSlotRef& s, std::int64_t i) {
  return s.master != nullptr ? s.master[i] : load_as<float>(s.param, s.param_dtype, i);
}

// Block-wise 8-bit moments (state_format.h): the chunk is walked one state
// block at a time; each thread holds up to kValuesPerThread values of the
// block in registers between the update and the requantization, and the
// block's new absmax is a block-wide max. Chunks (65536 values) hold whole
// state blocks (a power of two up to 4096), so no block straddles two CUDA blocks.
constexpr int kValuesPerThread = static_cast<int>(kernels::kMaxStateBlock) / kMultiTensorThreads;

template <int States, typename Update>
__device__ void update_int8_moments(const OptimSlotRef& s, std::int64_t begin, std::int64_t end, const float* codes,
                                    Update&& update) {
  __shared__ float code[2 * kernels::kCodeEntries];
  __shared__ float scratch[32];
  for (int k = static_cast<int>(threadIdx.x); k < 2 * kernels::kCodeEntries; k += static_cast<int>(blockDim.x)) {
    code[k] = codes[k];
  }
  __syncthreads();
  std::uint8_t* const bytes[2] = {static_cast<std::uint8_t*>(s.state1), static_cast<std::uint8_t*>(s.state2)};
  float* const absmax[2] = {s.absmax1, s.absmax2};
  const float* const table[2] = {code, code + kernels::kCodeEntries};  // exp_avg / momentum signed, exp_avg_sq unsigned
  const std::uint8_t zero[2] = {kernels::kSignedZeroCode, kernels::kUnsignedZeroCode};
  const std::int64_t block = s.state_block;
  for (std::int64_t first = begin; first < end; first += block) {
    const std::int64_t b = first / block;
    float values[States][kValuesPerThread];
    float local_max[States];
    for (int k = 0; k < States; ++k) local_max[k] = 0.0f;
    for (int r = 0; r < kValuesPerThread; ++r) {
      const std::int64_t j = threadIdx.x + static_cast<std::int64_t>(r) * blockDim.x, i = first + j;
      if (j >= block || i >= end) break;
      float m[States];
      for (int k = 0; k < States; ++k) m[k] = kernels::dequantize_state(table[k], bytes[k][i], absmax[k][b]);
      update(i, m);
      for (int k = 0; k < States; ++k) {
        values[k][r] = m[k];
        local_max[k] = rowwise::MaxKeepNan<float>()(local_max[k], fabsf(m[k]));
      }
    }
    float new_absmax[States];
    for (int k = 0; k < States; ++k) {
      new_absmax[k] = rowwise::block_reduce(local_max[k], scratch, rowwise::MaxKeepNan<float>(), 0.0f);
    }
    // Every thread has read its block's old absmax above (block_reduce synchronises): now it can change.
    if (threadIdx.x == 0) {
      for (int k = 0; k < States; ++k) absmax[k][b] = new_absmax[k];
    }
    for (int r = 0; r < kValuesPerThread; ++r) {
      const std::int64_t j = threadIdx.x + static_cast<std::int64_t>(r) * blockDim.x, i = first + j;
      if (j >= block || i >= end) break;
      for (int k = 0; k < States; ++k) bytes[k][i] = kernels::quantize_state(table[k], values[k][r], new_absmax[k], zero[k]);
    }
  }
}

// The moments of elements [begin, end) of a slot as f32 values the update
// can change, whatever their storage format: update(i, moments) runs once per
// element (States: 1 for SGD's momentum, 2 for AdamW's moments). Every thread
// of the block must call it: the 8-bit format reduces over the block.
template <int States, typename Update>
__device__ void update_moments(const OptimSlotRef& s, std::int64_t begin, std::int64_t end, float step,
                               const float* codes, Update&& update) {
  void* const stored[2] = {s.state1, s.state2};
  if (s.state_format == kernels::StateFormat::Int8Blockwise) {
    update_int8_moments<States>(s, begin, end, codes, update);
    return;
  }
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float m[States];
    for (int k = 0; k < States; ++k) m[k] = load_as<float>(stored[k], s.state_dtype, i);
    update(i, m);
    if (s.state_format == kernels::StateFormat::Bf16Stochastic) {
      const PhiloxBlock random = philox4x32_10(s.rounding_key, kernels::state_rounding_block(step, i));
      for (int k = 0; k < States; ++k) {
        static_cast<std::uint16_t*>(stored[k])[i] = kernels::f32_to_bf16_stochastic(m[k], random.word[2 * (i % 2) + k]);
      }
    } else {
      for (int k = 0; k < States; ++k) store_as<float>(stored[k], s.state_dtype, i, m[k]);
    }
  }
}

// Advances every slot's step counter (unless the step is skipped).
template <typename LaunchStep>
void advance_steps(const OptimSlotRef* slots, int count, LaunchStep&& launch_step) {
  for (int first = 0; first < count; first += kStepThreads) {
    StepTable table;
    table.count = count - first < kStepThreads ? count - first : kStepThreads;
    for (int k = 0; k < table.count; ++k) table.step[k] = slots[first + k].step;
    launch_step(table);
  }
}

template <typename LaunchUpdate>
void for_each_slot_launch(const OptimSlotRef* slots, int count, LaunchUpdate&& launch_update) {
  std::vector<std::int64_t> numels(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) numels[static_cast<size_t>(i)] = slots[i].numel;
  for_each_multi_tensor_launch<kSlots, kSlotBlocks>(numels, [&](const std::vector<int>& ids, const auto& chunks) {
    SlotTable table;
    for (size_t k = 0; k < ids.size(); ++k) table.slot[k] = slots[ids[k]];
    table.chunks = chunks;
    launch_update(table);
  });
}

}  // namespace

__global__ void advance_steps_kernel(StepTable table, const float* found_inf) {
  if (skipped(found_inf)) return;
  if (static_cast<int>(threadIdx.x) < table.count) *table.step[threadIdx.x] += 1.0f;
}

__global__ void __launch_bounds__(kMultiTensorThreads)
    adamw_kernel(SlotTable table, kernels::AdamWArgs args, const float* inv_scale, const float* found_inf,
                 const double* lr_factor, const float* codes) {
  if (skipped(found_inf)) return;  // the device-side skip: nothing changes
  if (lr_factor != nullptr) args.lr *= *lr_factor;  // the device-side schedule
  const OptimSlotRef& s = table.slot[table.chunks.block_tensor[blockIdx.x]];
  std::int64_t begin, end;
  chunk_range(table.chunks.block_chunk[blockIdx.x], s.numel, begin, end);
  const float unscale = inv_scale != nullptr ? *inv_scale : 1.0f;
  const float t = *s.step;
  update_moments<2>(s, begin, end, t, codes, [&](std::int64_t i, float (&m)[2]) {
    float w = read_weight(s, i);
    const float g = load_as<float>(s.grad, s.grad_dtype, i) * unscale;
    kernels::adamw_update(w, m[0], m[1], g, t, args);  // in f32 registers; rounded once on store
    write_weight(s, i, w, t);
  });
}

__global__ void __launch_bounds__(kMultiTensorThreads)
    sgd_kernel(SlotTable table, kernels::SgdArgs args, const float* inv_scale, const float* found_inf,
               const double* lr_factor, const float* codes) {
  if (skipped(found_inf)) return;
  if (lr_factor != nullptr) args.lr *= *lr_factor;
  const OptimSlotRef& s = table.slot[table.chunks.block_tensor[blockIdx.x]];
  std::int64_t begin, end;
  chunk_range(table.chunks.block_chunk[blockIdx.x], s.numel, begin, end);
  const float unscale = inv_scale != nullptr ? *inv_scale : 1.0f;
  const float t = *s.step;
  const bool first = t == 1.0f;
  auto update = [&](std::int64_t i, float (&buf)[1]) {
    float w = read_weight(s, i);
    const float g = load_as<float>(s.grad, s.grad_dtype, i) * unscale;
    kernels::sgd_update(w, buf[0], g, first, args);
    write_weight(s, i, w, t);
  };
  if (s.state1 != nullptr) {
    update_moments<1>(s, begin, end, t, codes, update);
  } else {
    for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float no_momentum[1] = {0.0f};
      update(i, no_momentum);
    }
  }
}

// One partial sum of squares per chunk.
__global__ void __launch_bounds__(kMultiTensorThreads)
    sum_of_squares_kernel(FlatTensorTable table, float* partials, std::int64_t block_base) {
  __shared__ float warp_sums[kMultiTensorThreads / 32];
  const int slot = table.chunks.block_tensor[blockIdx.x];
  std::int64_t begin, end;
  chunk_range(table.chunks.block_chunk[blockIdx.x], table.numel[slot], begin, end);
  float acc = 0.0f;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float v = load_as<float>(table.data[slot], table.dtype[slot], i);
    acc += v * v;
  }
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warp_sums[w];
    partials[block_base + blockIdx.x] = total;
  }
}

// out = the partials added in a fixed order (one block: deterministic).
__global__ void sum_partials_kernel(const float* partials, std::int64_t count, float* out) {
  __shared__ float warp_sums[32];
  float acc = 0.0f;
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warp_sums[w];
    *out = total;
  }
}

__global__ void __launch_bounds__(kMultiTensorThreads)
    scale_by_clip_kernel(FlatTensorTable table, const float* total_norm, double max_norm) {
  const double norm = *total_norm;
  const double coefficient = max_norm / (norm + 1e-6) < 1.0 ? max_norm / (norm + 1e-6) : 1.0;
  const auto c = static_cast<float>(norm != norm ? norm : coefficient);  // a NaN norm stays NaN: skipped later
  const int slot = table.chunks.block_tensor[blockIdx.x];
  std::int64_t begin, end;
  chunk_range(table.chunks.block_chunk[blockIdx.x], table.numel[slot], begin, end);
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    store_as<float>(table.data[slot], table.dtype[slot], i, load_as<float>(table.data[slot], table.dtype[slot], i) * c);
  }
}

__global__ void advance_lr_schedule_kernel(kernels::LrSchedule schedule, long long* step_count,
                                           const float* found_inf, double* factor) {
  if (!skipped(found_inf)) *step_count += 1;
  *factor = kernels::lr_schedule_factor(schedule, *step_count);
}

void advance_lr_schedule(const kernels::LrSchedule& schedule, long long* step_count, const float* found_inf,
                         double* factor, Stream stream) {
  launch("advance_lr_schedule_kernel", advance_lr_schedule_kernel, dim3(1), dim3(1), 0, stream, schedule, step_count,
         found_inf, factor);
}

void adamw_step(const OptimSlotRef* slots, int count, const kernels::AdamWArgs& args, const float* inv_scale,
                const float* found_inf, const double* lr_factor, const float* codes, Stream stream) {
  advance_steps(slots, count, [&](const StepTable& table) {
    launch("advance_steps_kernel", advance_steps_kernel, dim3(1), dim3(kStepThreads), 0, stream, table, found_inf);
  });
  for_each_slot_launch(slots, count, [&](const SlotTable& table) {
    launch("adamw_kernel", adamw_kernel, dim3(table.chunks.num_blocks), dim3(kMultiTensorThreads), 0, stream, table,
           args, inv_scale, found_inf, lr_factor, codes);
  });
}

void sgd_step(const OptimSlotRef* slots, int count, const kernels::SgdArgs& args, const float* inv_scale,
              const float* found_inf, const double* lr_factor, const float* codes, Stream stream) {
  advance_steps(slots, count, [&](const StepTable& table) {
    launch("advance_steps_kernel", advance_steps_kernel, dim3(1), dim3(kStepThreads), 0, stream, table, found_inf);
  });
  for_each_slot_launch(slots, count, [&](const SlotTable& table) {
    launch("sgd_kernel", sgd_kernel, dim3(table.chunks.num_blocks), dim3(kMultiTensorThreads), 0, stream, table, args,
           inv_scale, found_inf, lr_factor, codes);
  });
}

void sum_of_squares(const TensorRef* tensors, int count, float* partials, float* out, Stream stream) {
  std::int64_t total_blocks = 0;
  for_each_flat_launch(tensors, count, [&](const FlatTensorTable& table, std::int64_t block_base) {
    launch("sum_of_squares_kernel", sum_of_squares_kernel, dim3(table.chunks.num_blocks), dim3(kMultiTensorThreads),
           0, stream, table, partials, block_base);
    total_blocks = block_base + table.chunks.num_blocks;
  });
  launch("sum_partials_kernel", sum_partials_kernel, dim3(1), dim3(256), 0, stream, static_cast<const float*>(partials),
         total_blocks, out);
}

void scale_by_clip_coefficient(const TensorRef* tensors, int count, const float* total_norm, double max_norm,
                               Stream stream) {
  for_each_flat_launch(tensors, count, [&](const FlatTensorTable& table, std::int64_t) {
    launch("scale_by_clip_kernel", scale_by_clip_kernel, dim3(table.chunks.num_blocks), dim3(kMultiTensorThreads), 0,
           stream, table, total_norm, max_norm);
  });
}

}  // namespace mt::MT_KERNEL_NS
