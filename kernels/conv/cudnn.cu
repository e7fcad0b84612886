// conv2d through cuDNN: the vendor back end of the CUDA-path convolution,
// beside cuda.cu's own im2col + GEMM kernels.
//
// What: the same y = conv2d(x, w) (+ bias) and dx, dw, dbias as cuda.cu
//   (NCHW, cross-correlation as in PyTorch, stride / padding / dilation /
//   groups), through cuDNN's legacy convolution API (still in cuDNN 9).
// Algorithm: no kernel of its own — it describes the problem to cuDNN.
//   forward   cudnnConvolutionForward, then an own kernel adds bias[o]
//   dx        cudnnConvolutionBackwardData
//   dweight   cudnnConvolutionBackwardFilter
//   dbias     cuda.cu's own channel_sum_kernel (conv2d_backward with only
//             dbias): a fixed-order f32 reduction, the same bits as the own path.
//   Each pass asks cuDNN's heuristics (cudnnGet*Algorithm_v7) once per
//   (device, dtype, shape) and caches the answer: the first result with
//   CUDNN_STATUS_SUCCESS whose workspace (cudnnGet*WorkspaceSize) is at most
//   256 MiB, preferring deterministic algorithms (a seeded run reproduces its
//   losses, DESIGN §7; cuDNN's atomics-based BWD_*_ALGO_0 do not) and taking
//   a non-deterministic one only when no deterministic one qualifies.
// Selection (conv2d_backend): MT_CONV=auto|own|cudnn. auto means cuDNN on a
//   GPU built with it, own kernels in the simulator (there is no cuDNN there)
//   and in a GPU build configured without cuDNN (MT_WITH_CUDNN=0);
//   MT_CONV=cudnn falls back to own in both. Empty problems always run own.
// Memory: the workspace comes from the caller — kernels/conv/conv.h allocates it
//   from the caching allocator with the size conv2d_cudnn_workspace_bytes
//   reports; nothing here calls cudaMalloc. When cuDNN runs, the own path's
//   im2col buffers (KH*KW times the input) are not allocated at all.
// Precision: f16 and bf16 data compute in f32 (CUDNN_DATA_FLOAT) with
//   CUDNN_TENSOR_OP_MATH (Tensor Cores); f32 is true FP32 (CUDNN_FMA_MATH, no
//   TF32, like mixtape's GEMM: tensor-op heuristic results are skipped); f64
//   runs in f64. The bias is a second pass, so f16/bf16 outputs with a bias
//   are rounded twice (the conv result, then + bias), within a rounding of
//   the own path's single rounding.
// Threads: one cudnnHandle per device, created on first use; a mutex guards
//   it from cudnnSetStream until the asynchronous call is queued, and guards
//   the algorithm cache.
// Bound / speed: as cuDNN's chosen algorithm. Measured only through training
//   (H200, 2026-11-29, bench/results/gpu_check_20261129_2225.md, 400-step
//   runs, one each): resnet fp16 10.7k samples/s with cuDNN vs 8.2k with the
//   own kernels, peak memory 539 vs 827 MB (no im2col buffers). The small
//   cnn's runs were too short to compare: they trained for ~1.5 s, and
//   cuDNN's one-time set-up fell inside that time (own 41.0k vs cuDNN 34.7k).
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/conv/api.h"
#include "kernels/common/element.h"
#include "runtime/launch.h"

#if !MT_SIM_BUILD && defined(MT_WITH_CUDNN) && MT_WITH_CUDNN
#define MT_CONV_HAS_CUDNN 1
#else
#define MT_CONV_HAS_CUDNN 0
#endif

#if MT_CONV_HAS_CUDNN
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <compare>
#include <map>
#include <mutex>
#include <vector>
#endif

namespace mt::MT_KERNEL_NS {
namespace {

using kernels::ConvBackend;
using kernels::ConvPass;
using kernels::ConvShape;
using kernels::KernelDType;

ConvBackend backend_from_environment() {
  const char* value = std::getenv("MT_CONV");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) return ConvBackend::Auto;
  if (std::strcmp(value, "own") == 0) return ConvBackend::Own;
  if (std::strcmp(value, "cudnn") == 0) return ConvBackend::Cudnn;
  throw std::invalid_argument(std::string("MT_CONV='") + value + "': expected auto, own or cudnn");
}

void require_cudnn_shape(const ConvShape& s) {
  if (!kernels::conv2d_cudnn_fits(s)) {
    throw std::invalid_argument("conv2d (cuDNN): an empty convolution or a size beyond int; run the own kernels");
  }
}

#if MT_CONV_HAS_CUDNN

constexpr std::size_t kMaxWorkspaceBytes = std::size_t(256) << 20;

std::string describe(KernelDType dtype, const ConvShape& s) {
  const auto n = [](int64_t v) { return std::to_string(v); };
  return std::string(kernels::kernel_dtype_name(dtype)) + " x [" + n(s.batch) + ", " + n(s.in_channels) + ", " +
         n(s.in_h) + ", " + n(s.in_w) + "] weight [" + n(s.out_channels) + ", " + n(s.group_in()) + ", " +
         n(s.kernel_h) + ", " + n(s.kernel_w) + "] stride " + n(s.stride_h) + "x" + n(s.stride_w) + " padding " +
         n(s.pad_h) + "x" + n(s.pad_w) + " dilation " + n(s.dilation_h) + "x" + n(s.dilation_w) + " groups " +
         n(s.groups);
}

void check_cudnn(cudnnStatus_t status, const char* call, KernelDType dtype, const ConvShape& s) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuDNN: ") + call + " failed with " + cudnnGetErrorString(status) +
                             " for conv2d " + describe(dtype, s));
  }
}

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuDNN: ") + call + " failed with " + cudnnGetErrorString(status));
  }
}

cudnnDataType_t data_type(KernelDType dtype) {
  switch (dtype) {
    case KernelDType::F16: return CUDNN_DATA_HALF;
    case KernelDType::BF16: return CUDNN_DATA_BFLOAT16;
    case KernelDType::F32: return CUDNN_DATA_FLOAT;
    case KernelDType::F64: return CUDNN_DATA_DOUBLE;
  }
  return CUDNN_DATA_FLOAT;
}

// f16/bf16 accumulate in f32 (cuDNN's "pseudo half" configurations).
cudnnDataType_t compute_type(KernelDType dtype) {
  return dtype == KernelDType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

// What the heuristics are asked for: Tensor Cores for 16-bit data, FMA-only
// (true FP32: cuDNN's default math would allow TF32 on Ampere and later) for f32.
cudnnMathType_t preferred_math(KernelDType dtype) {
  switch (dtype) {
    case KernelDType::F16:
    case KernelDType::BF16: return CUDNN_TENSOR_OP_MATH;
    case KernelDType::F32: return CUDNN_FMA_MATH;
    case KernelDType::F64: return CUDNN_DEFAULT_MATH;
  }
  return CUDNN_DEFAULT_MATH;
}

// Whether a heuristic result's math type keeps mixtape's precision: never a
// conversion to a narrower type, and no tensor-op (TF32) result for f32,
// which then runs FMA-only (run_math).
bool keeps_precision(KernelDType dtype, cudnnMathType_t math) {
  if (math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
  return dtype != KernelDType::F32 || math == CUDNN_FMA_MATH || math == CUDNN_DEFAULT_MATH;
}

// The math type an algorithm runs with: f32 always FMA-only; otherwise the
// heuristic result's own (what it was rated with).
cudnnMathType_t run_math(KernelDType dtype, cudnnMathType_t heuristic) {
  return dtype == KernelDType::F32 ? CUDNN_FMA_MATH : heuristic;
}

// The descriptors of one convolution: x [N, C, H, W], w [O, C/G, KH, KW],
// y [N, O, OH, OW] (dx and dy share x's and y's). Host
// objects only, cheap enough to build per call.
// (The base owns them, so a constructor that throws half-way leaks none.)
struct DescriptorSet {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  DescriptorSet() = default;
  DescriptorSet(const DescriptorSet&) = delete;
  DescriptorSet& operator=(const DescriptorSet&) = delete;
  ~DescriptorSet() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

struct ConvDescriptors : DescriptorSet {
  ConvDescriptors(KernelDType dtype, const ConvShape& s) {
    const cudnnDataType_t type = data_type(dtype);
    const auto i = [](int64_t v) { return static_cast<int>(v); };
    check_cudnn(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
    check_cudnn(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    check_cudnn(
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, i(s.batch), i(s.in_channels), i(s.in_h), i(s.in_w)),
        "cudnnSetTensor4dDescriptor (x)", dtype, s);
    check_cudnn(
        cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, i(s.batch), i(s.out_channels), i(s.out_h), i(s.out_w)),
        "cudnnSetTensor4dDescriptor (y)", dtype, s);
    check_cudnn(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, i(s.out_channels), i(s.group_in()),
                                           i(s.kernel_h), i(s.kernel_w)),
                "cudnnSetFilter4dDescriptor", dtype, s);
    check_cudnn(
        cudnnSetConvolution2dDescriptor(conv, i(s.pad_h), i(s.pad_w), i(s.stride_h), i(s.stride_w), i(s.dilation_h),
                                        i(s.dilation_w), CUDNN_CROSS_CORRELATION, compute_type(dtype)),
        "cudnnSetConvolution2dDescriptor", dtype, s);
    check_cudnn(cudnnSetConvolutionGroupCount(conv, i(s.groups)), "cudnnSetConvolutionGroupCount", dtype, s);
    set_math(preferred_math(dtype), dtype, s);
  }

  void set_math(cudnnMathType_t math, KernelDType dtype, const ConvShape& s) {
    check_cudnn(cudnnSetConvolutionMathType(conv, math), "cudnnSetConvolutionMathType", dtype, s);
  }
};

// One pass's chosen algorithm (a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t).
struct Algorithm {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::size_t workspace_bytes = 0;
};

struct AlgorithmKey {
  int device = 0;
  KernelDType dtype = KernelDType::F32;
  ConvPass pass = ConvPass::Forward;
  std::array<int64_t, 16> shape{};
  auto operator<=>(const AlgorithmKey&) const = default;
};

AlgorithmKey key_of(int device, KernelDType dtype, ConvPass pass, const ConvShape& s) {
  return {device,
          dtype,
          pass,
          {s.batch, s.in_channels, s.in_h, s.in_w, s.out_channels, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w,
           s.pad_h, s.pad_w, s.dilation_h, s.dilation_w, s.groups, s.out_h, s.out_w}};
}

// Per process: a handle per device and the algorithm cache, behind one mutex.
// Never destroyed: a static destructor could run after the CUDA runtime has
// shut down.
struct CudnnState {
  std::mutex mutex;
  std::vector<cudnnHandle_t> handles;  // by device index
  std::map<AlgorithmKey, Algorithm> algorithms;
};

CudnnState& cudnn_state() {
  static CudnnState* state = new CudnnState;
  return *state;
}

int current_device() {
  int device = 0;
  const cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess)
    throw std::runtime_error(std::string("cuDNN: cudaGetDevice failed: ") + cudaGetErrorString(error));
  return device;
}

// The current device's handle, created on first use. Caller holds state.mutex.
cudnnHandle_t handle_for(CudnnState& state, int device) {
  if (state.handles.size() <= static_cast<std::size_t>(device)) state.handles.resize(device + 1, nullptr);
  cudnnHandle_t& handle = state.handles[device];
  if (handle == nullptr) check_cudnn(cudnnCreate(&handle), "cudnnCreate");
  return handle;
}

// The first result that ran the heuristic successfully, keeps the precision
// and fits kMaxWorkspaceBytes under the math type it will run with;
// deterministic ones first. workspace_size(algo, &bytes) asks cuDNN for the
// size the call needs (the heuristic's `memory` field is only its estimate).
template <typename Perf, typename WorkspaceSize>
Algorithm first_usable(const std::vector<Perf>& results, int count, ConvDescriptors& d, KernelDType dtype,
                       const ConvShape& s, const char* pass_name, WorkspaceSize&& workspace_size) {
  for (const bool deterministic_only : {true, false}) {
    for (int i = 0; i < count; ++i) {
      const Perf& result = results[static_cast<std::size_t>(i)];
      if (result.status != CUDNN_STATUS_SUCCESS || !keeps_precision(dtype, result.mathType)) continue;
      if (deterministic_only && result.determinism != CUDNN_DETERMINISTIC) continue;
      const cudnnMathType_t math = run_math(dtype, result.mathType);
      d.set_math(math, dtype, s);
      std::size_t bytes = 0;
      if (workspace_size(result.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxWorkspaceBytes) continue;
      return {static_cast<int>(result.algo), math, bytes};
    }
  }
  throw std::runtime_error(std::string("cuDNN: no ") + pass_name + " algorithm within a " +
                           std::to_string(kMaxWorkspaceBytes >> 20) + " MiB workspace for conv2d " +
                           describe(dtype, s));
}

// cuDNN's own view of the output size must be the caller's.
void check_output_size(const ConvDescriptors& d, KernelDType dtype, const ConvShape& s) {
  int n = 0, c = 0, h = 0, w = 0;
  check_cudnn(cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &n, &c, &h, &w),
              "cudnnGetConvolution2dForwardOutputDim", dtype, s);
  if (n != s.batch || c != s.out_channels || h != s.out_h || w != s.out_w) {
    throw std::invalid_argument("conv2d (cuDNN): output size " + std::to_string(h) + "x" + std::to_string(w) +
                                " differs from the caller's " + std::to_string(s.out_h) + "x" +
                                std::to_string(s.out_w) + " for " + describe(dtype, s));
  }
}

Algorithm forward_algorithm(cudnnHandle_t handle, ConvDescriptors& d, KernelDType dtype, const ConvShape& s) {
  int max_count = 0;
  check_cudnn(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count),
              "cudnnGetConvolutionForwardAlgorithmMaxCount");
  std::vector<cudnnConvolutionFwdAlgoPerf_t> results(static_cast<std::size_t>(max_count));
  int count = 0;
  check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x, d.w, d.conv, d.y, max_count, &count, results.data()),
              "cudnnGetConvolutionForwardAlgorithm_v7", dtype, s);
  return first_usable(results, count, d, dtype, s, "forward", [&](cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(handle, d.x, d.w, d.conv, d.y, algo, bytes);
  });
}

Algorithm backward_data_algorithm(cudnnHandle_t handle, ConvDescriptors& d, KernelDType dtype, const ConvShape& s) {
  int max_count = 0;
  check_cudnn(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max_count),
              "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> results(static_cast<std::size_t>(max_count));
  int count = 0;
  check_cudnn(
      cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w, d.y, d.conv, d.x, max_count, &count, results.data()),
      "cudnnGetConvolutionBackwardDataAlgorithm_v7", dtype, s);
  return first_usable(results, count, d, dtype, s, "backward-data",
                      [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
                        return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.w, d.y, d.conv, d.x, algo, bytes);
                      });
}

Algorithm backward_filter_algorithm(cudnnHandle_t handle, ConvDescriptors& d, KernelDType dtype, const ConvShape& s) {
  int max_count = 0;
  check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max_count),
              "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> results(static_cast<std::size_t>(max_count));
  int count = 0;
  check_cudnn(
      cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x, d.y, d.conv, d.w, max_count, &count, results.data()),
      "cudnnGetConvolutionBackwardFilterAlgorithm_v7", dtype, s);
  return first_usable(
      results, count, d, dtype, s, "backward-filter", [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, d.x, d.y, d.conv, d.w, algo, bytes);
      });
}

// The cached algorithm of one pass; the heuristics run on the first call for
// a key. Caller holds state.mutex.
Algorithm algorithm_for(CudnnState& state, cudnnHandle_t handle, int device, KernelDType dtype, ConvPass pass,
                        const ConvShape& s) {
  const AlgorithmKey key = key_of(device, dtype, pass, s);
  const auto cached = state.algorithms.find(key);
  if (cached != state.algorithms.end()) return cached->second;
  ConvDescriptors d(dtype, s);
  check_output_size(d, dtype, s);
  Algorithm chosen;
  switch (pass) {
    case ConvPass::Forward: chosen = forward_algorithm(handle, d, dtype, s); break;
    case ConvPass::BackwardData: chosen = backward_data_algorithm(handle, d, dtype, s); break;
    case ConvPass::BackwardFilter: chosen = backward_filter_algorithm(handle, d, dtype, s); break;
  }
  state.algorithms.emplace(key, chosen);
  return chosen;
}

void require_workspace(const Algorithm& algorithm, std::size_t workspace_bytes, const char* pass_name) {
  if (workspace_bytes < algorithm.workspace_bytes) {
    throw std::invalid_argument(std::string("conv2d (cuDNN): the ") + pass_name + " algorithm needs a " +
                                std::to_string(algorithm.workspace_bytes) + "-byte workspace, got " +
                                std::to_string(workspace_bytes) + " (ask conv2d_cudnn_workspace_bytes)");
  }
}

// y[n, o, l] += bias[o], summed in the accumulator type and rounded once
// into y. (An own kernel rather than cudnnAddTensor, whose bf16 support the
// legacy API does not promise.)
template <typename E>
__global__ void add_channel_bias_kernel(typename E::Storage* y, const typename E::Storage* bias, int64_t total,
                                        int64_t channels, int64_t plane) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = (i / plane) % channels;
    y[i] = E::from_acc(E::to_acc(y[i]) + E::to_acc(bias[o]));
  }
}

void add_channel_bias(KernelDType dtype, void* y, const void* bias, const ConvShape& s, Stream stream) {
  constexpr int kThreads = 256;
  const int64_t total = s.batch * s.out_channels * s.out_plane();
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(1) << 20);
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    launch("add_channel_bias_kernel", add_channel_bias_kernel<E>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
           0, stream, static_cast<Storage*>(y), static_cast<const Storage*>(bias), total, s.out_channels,
           s.out_plane());
  });
}

// alpha = 1, beta = 0 or 1, in the type cuDNN reads them as: double for f64 data, else float.
struct Scalars {
  float f_zero = 0.0f, f_one = 1.0f;
  double d_zero = 0.0, d_one = 1.0;
  bool f64;
  explicit Scalars(KernelDType dtype) : f64(dtype == KernelDType::F64) {}
  const void* zero() const { return f64 ? static_cast<const void*>(&d_zero) : static_cast<const void*>(&f_zero); }
  const void* one() const { return f64 ? static_cast<const void*>(&d_one) : static_cast<const void*>(&f_one); }
};

#else

[[noreturn]] void no_cudnn() {
  throw std::invalid_argument(
      "conv2d: no cuDNN back end in this build: it needs a GPU build with cuDNN (this is the simulator build, or "
      "one configured without cuDNN, MT_WITH_CUDNN=0)");
}

#endif  // MT_CONV_HAS_CUDNN

}  // namespace

ConvBackend conv2d_backend(ConvBackend requested) {
  if (requested != ConvBackend::Auto) return requested;
  const ConvBackend from_env = backend_from_environment();
#if MT_CONV_HAS_CUDNN
  return from_env == ConvBackend::Own ? ConvBackend::Own : ConvBackend::Cudnn;
#else
  (void)from_env;
  return ConvBackend::Own;  // no cuDNN in the simulator or in this build
#endif
}

std::size_t conv2d_cudnn_workspace_bytes(KernelDType dtype, const ConvShape& s, ConvPass pass) {
  require_cudnn_shape(s);
#if MT_CONV_HAS_CUDNN
  CudnnState& state = cudnn_state();
  const int device = current_device();
  std::lock_guard<std::mutex> lock(state.mutex);
  return algorithm_for(state, handle_for(state, device), device, dtype, pass, s).workspace_bytes;
#else
  (void)dtype;
  (void)pass;
  no_cudnn();
#endif
}

void conv2d_cudnn_forward(KernelDType dtype, const void* x, const void* weight, const void* bias, void* y,
                          const ConvShape& s, void* workspace, std::size_t workspace_bytes, Stream stream) {
  require_cudnn_shape(s);
#if MT_CONV_HAS_CUDNN
  CudnnState& state = cudnn_state();
  const int device = current_device();
  std::lock_guard<std::mutex> lock(state.mutex);
  const cudnnHandle_t handle = handle_for(state, device);
  const Algorithm algorithm = algorithm_for(state, handle, device, dtype, ConvPass::Forward, s);
  require_workspace(algorithm, workspace_bytes, "forward");
  ConvDescriptors d(dtype, s);
  d.set_math(algorithm.math, dtype, s);
  const Scalars scalars(dtype);
  check_cudnn(cudnnSetStream(handle, static_cast<cudaStream_t>(stream.handle)), "cudnnSetStream");
  {
    const ProfiledRegion profiled("cudnnConvolutionForward", stream);
    check_cudnn(cudnnConvolutionForward(handle, scalars.one(), d.x, x, d.w, weight, d.conv,
                                        static_cast<cudnnConvolutionFwdAlgo_t>(algorithm.algo), workspace,
                                        workspace_bytes, scalars.zero(), d.y, y),
                "cudnnConvolutionForward", dtype, s);
  }
  if (bias != nullptr) add_channel_bias(dtype, y, bias, s, stream);
#else
  (void)dtype, (void)x, (void)weight, (void)bias, (void)y, (void)workspace, (void)workspace_bytes, (void)stream;
  no_cudnn();
#endif
}

void conv2d_cudnn_backward(KernelDType dtype, const void* dy, const void* x, const void* weight, void* dx,
                           void* dweight, void* dbias, const ConvShape& s, void* workspace, std::size_t workspace_bytes,
                           Stream stream) {
  require_cudnn_shape(s);
#if MT_CONV_HAS_CUDNN
  if (dx != nullptr && weight == nullptr) throw std::invalid_argument("conv2d_cudnn_backward: dx needs the weight");
  if (dweight != nullptr && x == nullptr) throw std::invalid_argument("conv2d_cudnn_backward: dweight needs x");
  if (dbias != nullptr) {  // own reduction kernel (cuda.cu); needs no workspace
    conv2d_backward(dtype, dy, nullptr, nullptr, nullptr, nullptr, dbias, s, nullptr, nullptr, nullptr, stream);
  }
  if (dx == nullptr && dweight == nullptr) return;
  CudnnState& state = cudnn_state();
  const int device = current_device();
  std::lock_guard<std::mutex> lock(state.mutex);
  const cudnnHandle_t handle = handle_for(state, device);
  ConvDescriptors d(dtype, s);
  const Scalars scalars(dtype);
  check_cudnn(cudnnSetStream(handle, static_cast<cudaStream_t>(stream.handle)), "cudnnSetStream");
  // Both passes run in order on one stream: they can share the workspace.
  if (dx != nullptr) {
    const Algorithm algorithm = algorithm_for(state, handle, device, dtype, ConvPass::BackwardData, s);
    require_workspace(algorithm, workspace_bytes, "backward-data");
    d.set_math(algorithm.math, dtype, s);
    const ProfiledRegion profiled("cudnnConvolutionBackwardData", stream);
    check_cudnn(cudnnConvolutionBackwardData(handle, scalars.one(), d.w, weight, d.y, dy, d.conv,
                                             static_cast<cudnnConvolutionBwdDataAlgo_t>(algorithm.algo), workspace,
                                             workspace_bytes, scalars.zero(), d.x, dx),
                "cudnnConvolutionBackwardData", dtype, s);
  }
  if (dweight != nullptr) {
    const Algorithm algorithm = algorithm_for(state, handle, device, dtype, ConvPass::BackwardFilter, s);
    require_workspace(algorithm, workspace_bytes, "backward-filter");
    d.set_math(algorithm.math, dtype, s);
    const ProfiledRegion profiled("cudnnConvolutionBackwardFilter", stream);
    check_cudnn(cudnnConvolutionBackwardFilter(handle, scalars.one(), d.x, x, d.y, dy, d.conv,
                                               static_cast<cudnnConvolutionBwdFilterAlgo_t>(algorithm.algo), workspace,
                                               workspace_bytes, scalars.zero(), d.w, dweight),
                "cudnnConvolutionBackwardFilter", dtype, s);
  }
#else
  (void)dtype, (void)dy, (void)x, (void)weight, (void)dx, (void)dweight, (void)dbias, (void)workspace,
      (void)workspace_bytes, (void)stream;
  no_cudnn();
#endif
}

}  // namespace mt::MT_KERNEL_NS
