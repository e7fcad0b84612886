// Elementwise kernels: unary math (+ backward), binary math with broadcasting,
// where, copy/cast, fill.
//
// What: out[i] = f(in_1[i], ..., in_k[i]) over tensors of one shape, where
// inputs arrive already broadcast (stride-0 dims) and any operand may be
// strided. The per-element formulas are kernels/elementwise/math.h, the
// very ones the CPU backend runs.
//
// Algorithm: a grid-stride loop (loop.h). The host merges dims
// that are contiguous in every operand, so most calls are 1-D; when every
// operand is then unit-stride, 16-byte aligned and of one element size (2 or
// 4 bytes), each thread moves 128 bits per operand per iteration (one LDG.128
// / STG.128 instead of four or eight scalar accesses). Otherwise each element
// turns its linear index into per-operand offsets with the sizes and strides
// that travel in the kernel argument (a small fixed-size struct, by value).
//
// Precision: f16/bf16/f32 are computed in f32, f64 and integers in f64, and
// the result is rounded once on store — the CPU backend's rule, so the two
// agree to the last bit for + - * / and to libm-vs-CUDA-math ulps otherwise.
// Same-dtype copies move bits (NaN payloads survive); casts round once.
//
// Bound: memory bandwidth (a few flops per 2-12 bytes moved). The target is
// >= 80% of the device-to-device copy bandwidth on tensors of a few hundred
// MB. Measured (H200, 2026-11-29, bench/results/gpu_check_20261129_2204.md, 256 MB operands):
//   add 103% of copy bandwidth in f32/f16/bf16 (~3.99 TB/s), gelu 93% f32,
//   76% f16/bf16.
//
// Code size: one kernel per (op, compute type), with operand dtypes a runtime
// switch (uniform across the grid, so no divergence) — not per dtype
// combination, which would multiply nvcc's work by 16.
// cuda_compat.h (via launch.h) comes first: it defines __host__/__device__ for the simulator build.
#include "runtime/launch.h"

#include "kernels/elementwise/api.h"
#include "kernels/elementwise/loop.h"

namespace mt::MT_KERNEL_NS {

using kernels::BinaryOp;
using kernels::UnaryOp;

namespace {



}  // namespace

// ---- kernels ---------------------------------------------------------------------------

template <UnaryOp Op, typename T>
__global__ void unary_kernel(StridedIter<2> it, T a, T b) {
  elementwise_loop<T>(it, [=](const T (&in)[1]) { return kernels::unary_forward<Op, T>(in[0], a, b); });
}

// Operands: grad_in, grad_out, x, y.
template <UnaryOp Op, typename T>
__global__ void unary_backward_kernel(StridedIter<4> it, T a, T b) {
  elementwise_loop<T>(it, [=](const T (&in)[3]) { return kernels::unary_backward<Op, T>(in[1], in[2], in[0], a, b); });
}

template <BinaryOp Op, typename T>
__global__ void binary_kernel(StridedIter<3> it) {
  elementwise_loop<T>(it, [](const T (&in)[2]) { return kernels::binary_forward<Op, T>(in[0], in[1]); });
}

// Operands: out, cond, a, b.
template <typename T>
__global__ void where_kernel(StridedIter<4> it) {
  elementwise_loop<T>(it, [](const T (&in)[3]) { return in[0] != T(0) ? in[1] : in[2]; });
}

// A cast: load as T, round once into the destination dtype.
template <typename T>
__global__ void cast_kernel(StridedIter<2> it) {
  elementwise_loop<T>(it, [](const T (&in)[1]) { return in[0]; });
}

// A same-dtype copy moves the bits, in words of the element's size.
template <typename Word>
__global__ void copy_bits_kernel(StridedIter<2> it) {
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  if (it.pack > 0) {  // contiguous and aligned: 16 bytes per thread per iteration
    const std::int64_t packs = it.numel / it.pack;
    for (std::int64_t p = first; p < packs; p += step) {
      reinterpret_cast<uint4*>(it.data[0])[p] = reinterpret_cast<const uint4*>(it.data[1])[p];
    }
    for (std::int64_t i = packs * it.pack + first; i < it.numel; i += step) {
      static_cast<Word*>(it.data[0])[i] = static_cast<const Word*>(it.data[1])[i];
    }
    return;
  }
  for (std::int64_t i = first; i < it.numel; i += step) {
    std::int64_t off[2];
    operand_offsets(it, i, off);
    static_cast<Word*>(it.data[0])[off[0]] = static_cast<const Word*>(it.data[1])[off[1]];
  }
}

__global__ void fill_kernel(StridedIter<1> it, double value) {
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = first; i < it.numel; i += step) {
    std::int64_t off[1];
    operand_offsets(it, i, off);
    store_as<double>(it.data[0], it.dtype[0], off[0], value);
  }
}

// ---- host entry points -----------------------------------------------------------------

void unary(UnaryOp op, const TensorRef& in, const TensorRef& out, double a, double b, Stream stream) {
  if (out.numel == 0) return;
  const TensorRef* operands[2] = {&out, &in};
  const auto it = make_strided_iter(operands);
  const bool dbl = kernels::computes_in_double(in.dtype) || kernels::computes_in_double(out.dtype);
  kernels::declare_launch_work(kernels::distinct_bytes(out) + kernels::distinct_bytes(in));
  kernels::visit_unary(op, [&](auto tag) {
    constexpr UnaryOp Op = decltype(tag)::value;
    if (dbl) {
      launch("unary_kernel", unary_kernel<Op, double>, elementwise_grid(work_items(it)), dim3(kElementwiseThreads), 0,
             stream, it, a, b);
    } else {
      launch("unary_kernel", unary_kernel<Op, float>, elementwise_grid(work_items(it)), dim3(kElementwiseThreads), 0,
             stream, it, static_cast<float>(a), static_cast<float>(b));
    }
  });
}

void unary_backward(UnaryOp op, const TensorRef& grad_out, const TensorRef& in, const TensorRef& out,
                    const TensorRef& grad_in, double a, double b, Stream stream) {
  if (grad_in.numel == 0) return;
  // Ops whose backward needs x or y read them; an undefined tensor means "not needed".
  const TensorRef& x = in.data != nullptr ? in : grad_out;
  const TensorRef& y = out.data != nullptr ? out : grad_out;
  const TensorRef* operands[4] = {&grad_in, &grad_out, &x, &y};
  const auto it = make_strided_iter(operands);
  const bool dbl = kernels::computes_in_double(grad_in.dtype);
  kernels::declare_launch_work(kernels::distinct_bytes(grad_in) + kernels::distinct_bytes(grad_out) +
                               (in.data != nullptr ? kernels::distinct_bytes(in) : 0) +
                               (out.data != nullptr ? kernels::distinct_bytes(out) : 0));
  kernels::visit_unary(op, [&](auto tag) {
    constexpr UnaryOp Op = decltype(tag)::value;
    if (dbl) {
      launch("unary_backward_kernel", unary_backward_kernel<Op, double>, elementwise_grid(work_items(it)),
             dim3(kElementwiseThreads), 0, stream, it, a, b);
    } else {
      launch("unary_backward_kernel", unary_backward_kernel<Op, float>, elementwise_grid(work_items(it)),
             dim3(kElementwiseThreads), 0, stream, it, static_cast<float>(a), static_cast<float>(b));
    }
  });
}

void binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out, Stream stream) {
  if (out.numel == 0) return;
  const TensorRef* operands[3] = {&out, &a, &b};
  const auto it = make_strided_iter(operands);
  const bool dbl = kernels::computes_in_double(a.dtype) || kernels::computes_in_double(b.dtype) ||
                   kernels::computes_in_double(out.dtype);
  kernels::declare_launch_work(kernels::distinct_bytes(out) + kernels::distinct_bytes(a) + kernels::distinct_bytes(b));
  kernels::visit_binary(op, [&](auto tag) {
    constexpr BinaryOp Op = decltype(tag)::value;
    if (dbl) {
      launch("binary_kernel", binary_kernel<Op, double>, elementwise_grid(work_items(it)), dim3(kElementwiseThreads),
             0, stream, it);
    } else {
      launch("binary_kernel", binary_kernel<Op, float>, elementwise_grid(work_items(it)), dim3(kElementwiseThreads),
             0, stream, it);
    }
  });
}

void where(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const TensorRef& out, Stream stream) {
  if (out.numel == 0) return;
  const TensorRef* operands[4] = {&out, &cond, &a, &b};
  const auto it = make_strided_iter(operands);
  if (kernels::computes_in_double(out.dtype)) {
    launch("where_kernel", where_kernel<double>, elementwise_grid(work_items(it)), dim3(kElementwiseThreads), 0,
           stream, it);
  } else {
    launch("where_kernel", where_kernel<float>, elementwise_grid(work_items(it)), dim3(kElementwiseThreads), 0,
           stream, it);
  }
}

void copy(const TensorRef& src, const TensorRef& dst, Stream stream) {
  if (dst.numel == 0) return;
  const TensorRef* operands[2] = {&dst, &src};
  auto it = make_strided_iter(operands);
  const dim3 block(kElementwiseThreads);
  if (src.dtype == dst.dtype) {
    const int size = kernels::element_bytes(src.dtype);
    // 1- and 8-byte elements also take the 16-byte path when contiguous and aligned.
    if (it.pack == 0 && it.ndim == 1 && it.strides[0][0] == 1 && it.strides[1][0] == 1 &&
        reinterpret_cast<std::uintptr_t>(it.data[0]) % 16 == 0 && reinterpret_cast<std::uintptr_t>(it.data[1]) % 16 == 0) {
      it.pack = 16 / size;
    }
    const dim3 grid = elementwise_grid(work_items(it));
    switch (size) {
      case 1: return launch("copy_bits_kernel", copy_bits_kernel<std::uint8_t>, grid, block, 0, stream, it);
      case 2: return launch("copy_bits_kernel", copy_bits_kernel<std::uint16_t>, grid, block, 0, stream, it);
      case 4: return launch("copy_bits_kernel", copy_bits_kernel<std::uint32_t>, grid, block, 0, stream, it);
      default: return launch("copy_bits_kernel", copy_bits_kernel<std::uint64_t>, grid, block, 0, stream, it);
    }
  }
  const dim3 grid = elementwise_grid(work_items(it));
  if (kernels::computes_in_double(src.dtype) || kernels::computes_in_double(dst.dtype)) {
    launch("cast_kernel", cast_kernel<double>, grid, block, 0, stream, it);
  } else {
    launch("cast_kernel", cast_kernel<float>, grid, block, 0, stream, it);
  }
}

void fill(const TensorRef& out, double value, Stream stream) {
  if (out.numel == 0) return;
  const TensorRef* operands[1] = {&out};
  const auto it = make_strided_iter(operands);
  launch("fill_kernel", fill_kernel, elementwise_grid(it.numel), dim3(kElementwiseThreads), 0, stream, it, value);
}

}  // namespace mt::MT_KERNEL_NS
