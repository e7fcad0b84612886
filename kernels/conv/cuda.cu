// conv2d (cross-correlation, as PyTorch) over NCHW, forward and backward, as
// im2col + the production GEMM (kernels/gemm/api.h).
//
// Two back ends: this file is the "own" one, built for the simulator and the
// GPU; cudnn.cu is the other, cuDNN (GPU builds with cuDNN only).
// MT_CONV=auto|own|cudnn picks (conv2d_backend, read by kernels/conv/conv.h):
// auto means cuDNN on a GPU that has it, these kernels on the sim device.
//
// What: y[n, o] = sum_{c, ki, kj} w[o, c, ki, kj] * x[n, g*C/G + c, oy*sh - ph + ki*dh, ox*sw - pw + kj*dw]
//   (+ bias[o]), with groups; and its gradients dx, dw, dbias (the semantics
//   of kernels/conv/cpu.cpp, which the tests compare against).
// Algorithm (K = C/G*KH*KW, L = OH*OW, one GEMM launch per group):
//   forward   im2col writes col[n, g] = [K + 1, L]; its last row is all ones
//             and the packed weight [O, K + 1] carries bias[o] in its last
//             column, so y[n, g] = Wpacked_g @ col[n, g] adds the bias inside
//             the GEMM's f32 accumulator (one rounding, like the CPU). The
//             GEMM is batched over n with a zero batch stride for W.
//   dweight   dy is transposed to [O, N*L] and im2col writes the whole batch
//             as col_g [K, N*L]; then dW_g = dy_g @ col_g^T is a GEMM whose
//             reduction runs over N*L. The batch sum happens inside the GEMM's
//             f32 accumulator: deterministic, no atomics, one rounding. When
//             O x K is too small to fill the GPU (conv2d_weight_grad_splits),
//             the reduction is split over groups of samples: one batched
//             GEMM writes each group's f32 partial dW (c_is_f32), and
//             sum_partials_kernel adds them in order and rounds once.
//   dbias     one block per output channel sums dy over (n, oy, ox) with a
//             fixed-order block reduction (the cuDNN back end uses it too).
//   dx        dcol[n, g] = W_g^T @ dy[n, g] (GEMM batched over n), then col2im
//             as a gather: one thread per input element sums, in f32, the
//             dcol entries of the (ki, kj) taps that read it (in the CPU's
//             order) and stores once. No atomics.
// Precision: f16/bf16 run the Tensor Core GEMM (mma.sync, f32 accumulation);
//   f32 the true-FP32 tiled GEMM, f64 in f64. Forward and dweight round once.
//   dx rounds twice for f16/bf16: dcol is stored in the input dtype (the GEMM
//   writes its operands' dtype) before col2im sums the taps in f32.
// Bound: the GEMMs are compute-bound for real layers; im2col/col2im are
//   bandwidth-bound and cost KH*KW times the input's size in memory traffic
//   and workspace (the col buffer holds the whole batch — a chunked or
//   implicit-GEMM version would not). Left on the table: implicit GEMM
//   (im2col fused into the GEMM's shared-memory loads), NHWC — what cuDNN's
//   algorithms do.
// Speed: not measured per kernel. In training on an H200 (2026-11-29, see
//   cudnn.cu) the own kernels gave 0.77x cuDNN's throughput on resnet
//   fp16 with 1.5x its peak memory.
#include "kernels/common/block_reduce.h"
#include "kernels/conv/api.h"
#include "kernels/common/element.h"
#include "kernels/gemm/api.h"
#include "runtime/launch.h"

namespace mt::MT_KERNEL_NS {
namespace {

using kernels::ConvShape;
using kernels::GemmArgs;
using kernels::GemmBackend;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20;
constexpr int64_t kMaxGemmBatch = 65535;  // grid.z

dim3 grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks));
}

// wp[o, k] = w[o, k] for k < K, bias[o] for k == K (only when Kp == K + 1).
template <typename E>
__global__ void pack_weight_kernel(const typename E::Storage* w, const typename E::Storage* bias,
                                   typename E::Storage* wp, int64_t out_channels, int64_t k, int64_t kp) {
  const int64_t total = out_channels * kp;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / kp, j = i % kp;
    wp[i] = j < k ? w[o * k + j] : bias[o];
  }
}

// col[n, g, j, l] at n*sn + g*sg + j*sj + l for j < kp: the input value tap j
// of output position l reads (0 in the padding); row j == K (when kp > K) is 1.
template <typename E>
__global__ void im2col_kernel(const typename E::Storage* x, typename E::Storage* col, ConvShape s, int64_t kp,
                              int64_t sn, int64_t sg, int64_t sj) {
  using Acc = typename E::Acc;
  const int64_t cg = s.in_channels / s.groups, khw = s.kernel_h * s.kernel_w, k = cg * khw;
  const int64_t L = s.out_h * s.out_w;
  const int64_t total = s.batch * s.groups * kp * L;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = i % L, j = (i / L) % kp, g = (i / (L * kp)) % s.groups, n = i / (L * kp * s.groups);
    typename E::Storage value;
    if (j == k) {
      value = E::from_acc(Acc(1));
    } else {
      const int64_t c = j / khw, ki = (j % khw) / s.kernel_w, kj = j % s.kernel_w;
      const int64_t oy = l / s.out_w, ox = l % s.out_w;
      const int64_t iy = oy * s.stride_h - s.pad_h + ki * s.dilation_h;
      const int64_t ix = ox * s.stride_w - s.pad_w + kj * s.dilation_w;
      if (iy >= 0 && iy < s.in_h && ix >= 0 && ix < s.in_w) {
        value = x[((n * s.in_channels + g * cg + c) * s.in_h + iy) * s.in_w + ix];
      } else {
        value = E::from_acc(Acc(0));
      }
    }
    col[n * sn + g * sg + j * sj + l] = value;
  }
}

// dx[n, c, iy, ix] = sum over the taps (ki, kj) that read it of dcol[n, g, (c, ki, kj), (oy, ox)].
template <typename E>
__global__ void col2im_kernel(const typename E::Storage* dcol, typename E::Storage* dx, ConvShape s) {
  using Acc = typename E::Acc;
  const int64_t cg = s.in_channels / s.groups, khw = s.kernel_h * s.kernel_w, k = cg * khw;
  const int64_t L = s.out_h * s.out_w;
  const int64_t total = s.batch * s.in_channels * s.in_h * s.in_w;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ix = i % s.in_w, iy = (i / s.in_w) % s.in_h, c = (i / (s.in_w * s.in_h)) % s.in_channels;
    const int64_t n = i / (s.in_w * s.in_h * s.in_channels);
    const int64_t g = c / cg, cl = c % cg;
    const typename E::Storage* base = dcol + ((n * s.groups + g) * k + cl * khw) * L;
    Acc acc = 0;
    for (int64_t ki = 0; ki < s.kernel_h; ++ki) {
      const int64_t ty = iy + s.pad_h - ki * s.dilation_h;
      if (ty < 0 || ty % s.stride_h != 0) continue;
      const int64_t oy = ty / s.stride_h;
      if (oy >= s.out_h) continue;
      for (int64_t kj = 0; kj < s.kernel_w; ++kj) {
        const int64_t tx = ix + s.pad_w - kj * s.dilation_w;
        if (tx < 0 || tx % s.stride_w != 0) continue;
        const int64_t ox = tx / s.stride_w;
        if (ox >= s.out_w) continue;
        acc += E::to_acc(base[(ki * s.kernel_w + kj) * L + oy * s.out_w + ox]);
      }
    }
    dx[i] = E::from_acc(acc);
  }
}

// out[o, n, l] = dy[n, o, l].
template <typename E>
__global__ void transpose_batch_channel_kernel(const typename E::Storage* dy, typename E::Storage* out, int64_t batch,
                                               int64_t channels, int64_t plane) {
  const int64_t total = batch * channels * plane;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = i % plane, n = (i / plane) % batch, o = i / (plane * batch);
    out[i] = dy[(n * channels + o) * plane + l];
  }
}

// dbias[o] = sum over (n, l) of dy[n, o, l]; one block per channel.
template <typename E>
__global__ void channel_sum_kernel(const typename E::Storage* dy, typename E::Storage* dbias, int64_t batch,
                                   int64_t channels, int64_t plane) {
  using Acc = typename E::Acc;
  __shared__ Acc scratch[32];
  const int64_t o = blockIdx.x, count = batch * plane;
  Acc sum = 0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    sum += E::to_acc(dy[((j / plane) * channels + o) * plane + j % plane]);
  }
  sum = rowwise::block_sum(sum, scratch);
  if (threadIdx.x == 0) dbias[o] = E::from_acc(sum);
}

// out[i] = sum over s of partials[s][i], in order, rounded once.
template <typename E>
__global__ void sum_partials_kernel(const float* partials, typename E::Storage* out, int64_t splits, int64_t count) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    float sum = 0;
    for (int64_t s = 0; s < splits; ++s) sum += partials[s * count + i];
    out[i] = E::from_acc(static_cast<typename E::Acc>(sum));
  }
}

// gemm() over a batch that may exceed grid.z: split it.
void batched_gemm(GemmArgs args, int64_t batch, std::size_t element, Stream stream) {
  for (int64_t first = 0; first < batch; first += kMaxGemmBatch) {
    GemmArgs part = args;
    part.batch = static_cast<int>(batch - first < kMaxGemmBatch ? batch - first : kMaxGemmBatch);
    part.a = static_cast<const char*>(args.a) + first * args.batch_stride_a * static_cast<int64_t>(element);
    part.b = static_cast<const char*>(args.b) + first * args.batch_stride_b * static_cast<int64_t>(element);
    part.c = static_cast<char*>(args.c) + first * args.batch_stride_c * static_cast<int64_t>(element);
    gemm(part, GemmBackend::Auto, stream);
  }
}

}  // namespace

void conv2d_forward(kernels::KernelDType dtype, const void* x, const void* weight, const void* bias, void* y,
                    const ConvShape& s, void* col_workspace, void* weight_workspace, Stream stream) {
  if (s.batch == 0 || s.out_channels == 0 || s.out_h * s.out_w == 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    const int64_t G = s.groups, og = s.out_channels / G, K = s.patch(), L = s.out_plane();
    const int64_t kp = K + (bias != nullptr ? 1 : 0);
    auto* col = static_cast<Storage*>(col_workspace);
    const Storage* w = static_cast<const Storage*>(weight);
    if (bias != nullptr) {
      auto* wp = static_cast<Storage*>(weight_workspace);
      launch("pack_weight_kernel", pack_weight_kernel<E>, grid_for(s.out_channels * kp), dim3(kThreads), 0, stream, w,
             static_cast<const Storage*>(bias), wp, s.out_channels, K, kp);
      w = wp;
    }
    launch("im2col_kernel", im2col_kernel<E>, grid_for(s.batch * G * kp * L), dim3(kThreads), 0, stream,
           static_cast<const Storage*>(x), col, s, kp, G * kp * L, kp * L, L);
    for (int64_t g = 0; g < G; ++g) {
      GemmArgs args;
      args.dtype = dtype;
      args.m = static_cast<int>(og), args.n = static_cast<int>(L), args.k = static_cast<int>(kp);
      args.a = w + g * og * kp, args.lda = kp, args.batch_stride_a = 0;
      args.b = col + g * kp * L, args.ldb = L, args.batch_stride_b = G * kp * L;
      args.c = static_cast<Storage*>(y) + g * og * L, args.ldc = L, args.batch_stride_c = s.out_channels * L;
      batched_gemm(args, s.batch, sizeof(Storage), stream);
    }
  });
}

void conv2d_backward(kernels::KernelDType dtype, const void* dy, const void* x, const void* weight, void* dx,
                     void* dweight, void* dbias, const ConvShape& s, void* col_workspace, void* dy_workspace,
                     float* dweight_partials, Stream stream) {
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    const int64_t G = s.groups, og = s.out_channels / G, K = s.patch(), L = s.out_plane(), N = s.batch;
    const auto* gy = static_cast<const Storage*>(dy);
    auto* col = static_cast<Storage*>(col_workspace);
    if (dbias != nullptr && s.out_channels > 0) {
      launch("channel_sum_kernel", channel_sum_kernel<E>, dim3(static_cast<unsigned>(s.out_channels)), dim3(kThreads),
             0, stream, gy, static_cast<Storage*>(dbias), N, s.out_channels, L);
    }
    if (dweight != nullptr && s.out_channels * K > 0) {
      auto* gy_t = static_cast<Storage*>(dy_workspace);
      const int64_t NL = N * L;
      if (NL > 0) {
        launch("transpose_batch_channel_kernel", transpose_batch_channel_kernel<E>, grid_for(N * s.out_channels * L),
               dim3(kThreads), 0, stream, gy, gy_t, N, s.out_channels, L);
        // The whole batch as col_g [K, N*L]: element (n, g, j, l) at g*K*N*L + j*N*L + n*L + l.
        launch("im2col_kernel", im2col_kernel<E>, grid_for(N * G * K * L), dim3(kThreads), 0, stream,
               static_cast<const Storage*>(x), col, s, K, L, K * NL, NL);
      }
      GemmArgs args;  // dW_g [og, K] = dy_g [og, N*L] @ (col_g [K, N*L])^T
      args.dtype = dtype;
      args.m = static_cast<int>(og), args.n = static_cast<int>(K);
      args.lda = NL > 0 ? NL : 1, args.ldb = NL > 0 ? NL : 1, args.trans_b = true;
      args.ldc = K;
      const int64_t splits = kernels::conv2d_weight_grad_splits(dtype, s);
      if (splits == 1) {
        args.batch = static_cast<int>(G);
        args.k = static_cast<int>(NL);
        args.a = gy_t, args.batch_stride_a = og * NL;
        args.b = col, args.batch_stride_b = K * NL;
        args.c = dweight, args.batch_stride_c = og * K;
        gemm(args, GemmBackend::Auto, stream);
      } else {
        // Split over groups of N / splits samples: piece p reduces columns
        // [p * piece, (p + 1) * piece) of dy_g and col_g into partials[p, g].
        const int64_t piece = NL / splits;
        args.batch = static_cast<int>(splits);
        args.k = static_cast<int>(piece);
        args.batch_stride_a = piece, args.batch_stride_b = piece;
        args.batch_stride_c = s.out_channels * K;
        args.c_is_f32 = true;
        for (int64_t g = 0; g < G; ++g) {
          args.a = gy_t + g * og * NL;
          args.b = col + g * K * NL;
          args.c = dweight_partials + g * og * K;
          gemm(args, GemmBackend::Auto, stream);
        }
        const int64_t count = s.out_channels * K;
        launch("sum_partials_kernel", sum_partials_kernel<E>, grid_for(count), dim3(kThreads), 0, stream,
               static_cast<const float*>(dweight_partials), static_cast<Storage*>(dweight), splits, count);
      }
    }
    if (dx != nullptr && N * s.in_channels * s.in_h * s.in_w > 0) {
      for (int64_t g = 0; g < G; ++g) {  // dcol[n, g] [K, L] = (W_g [og, K])^T @ dy[n, g] [og, L]
        GemmArgs args;
        args.dtype = dtype;
        args.m = static_cast<int>(K), args.n = static_cast<int>(L), args.k = static_cast<int>(og);
        args.a = static_cast<const Storage*>(weight) + g * og * K, args.lda = K, args.batch_stride_a = 0;
        args.trans_a = true;
        args.b = gy + g * og * L, args.ldb = L, args.batch_stride_b = s.out_channels * L;
        args.c = col + g * K * L, args.ldc = L, args.batch_stride_c = G * K * L;
        batched_gemm(args, N, sizeof(Storage), stream);
      }
      launch("col2im_kernel", col2im_kernel<E>, grid_for(N * s.in_channels * s.in_h * s.in_w), dim3(kThreads), 0,
             stream, static_cast<const Storage*>(col), static_cast<Storage*>(dx), s);
    }
  });
}

}  // namespace mt::MT_KERNEL_NS
