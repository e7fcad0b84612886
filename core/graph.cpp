#include "core/graph.h"

#include "core/caching_allocator.h"
#include "runtime/error.h"
#include "core/host_sync.h"
#include "runtime/sim/runtime.h"

#if defined(MT_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace mt {
namespace {

thread_local bool capturing_on_this_thread = false;

CachingAllocator& caching_allocator(Device device) {
  return device.is_sim() ? sim_caching_allocator() : cuda_caching_allocator(device.index);
}

#if defined(MT_WITH_CUDA)
void check_cuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) fail("CUDA graph: {}: {}", what, cudaGetErrorString(error));
}
#endif

}  // namespace

struct CudaGraph::Captured {
  std::shared_ptr<const simulator::CapturedWork> sim_work;
#if defined(MT_WITH_CUDA)
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
#endif
  ~Captured() {
#if defined(MT_WITH_CUDA)
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
#endif
  }
};

bool graph_capture_active() { return capturing_on_this_thread; }

CudaGraph::CudaGraph(Device device) : device_(device) {
  MT_CHECK(!device.is_cpu(), "CudaGraph: graphs capture device work; the CPU has none (use the sim device or a GPU)");
  stream_ = Stream::create(device);
}

CudaGraph::~CudaGraph() { reset(); }

bool CudaGraph::captured() const { return captured_ != nullptr; }

void CudaGraph::reset() {
  if (captured_ == nullptr) return;
  captured_.reset();
  caching_allocator(device_).release_graph(stream_.id());
}

void CudaGraph::capture(const std::function<void()>& body) {
  MT_CHECK(!captured(), "CudaGraph::capture: already captured (reset() first)");
  MT_CHECK(!capturing_on_this_thread, "CudaGraph::capture: captures cannot nest");
  auto captured = std::make_unique<Captured>();
  CachingAllocator& allocator = caching_allocator(device_);
  const uint64_t stream_id = stream_.id();
  allocator.begin_graph_capture(stream_id);
#if defined(MT_WITH_CUDA)
  const auto cuda_stream = static_cast<cudaStream_t>(stream_.handle());
  if (device_.is_cuda()) check_cuda(cudaStreamBeginCapture(cuda_stream, cudaStreamCaptureModeThreadLocal), "begin");
#endif
  if (device_.is_sim()) simulator::begin_capture(stream_id);
  capturing_on_this_thread = true;
  // Ends the capture whichever way body() leaves.
  auto end_capture = [&] {
    capturing_on_this_thread = false;
    if (device_.is_sim()) captured->sim_work = simulator::end_capture();
#if defined(MT_WITH_CUDA)
    if (device_.is_cuda()) {
      const cudaError_t error = cudaStreamEndCapture(cuda_stream, &captured->graph);
      if (error != cudaSuccess) {
        (void)cudaGetLastError();
        return std::string(cudaGetErrorString(error));
      }
    }
#endif
    allocator.end_graph_capture();
    return std::string();
  };
  try {
    const StreamGuard on_graph_stream(stream_);
    const ForbidHostSyncs no_syncs("CUDA-graph capture");
    body();
  } catch (...) {
    end_capture();
    captured.reset();
    allocator.release_graph(stream_id);
    throw;
  }
  const std::string error = end_capture();
  if (!error.empty()) {
    captured.reset();
    allocator.release_graph(stream_id);
    fail("CUDA graph: the capture failed: {} (an operation in the step cannot be captured)", error);
  }
#if defined(MT_WITH_CUDA)
  if (device_.is_cuda()) check_cuda(cudaGraphInstantiate(&captured->exec, captured->graph, 0), "instantiate");
#endif
  captured_ = std::move(captured);
}

void CudaGraph::replay() {
  MT_CHECK(captured(), "CudaGraph::replay: nothing captured");
  if (device_.is_sim()) {
    simulator::replay(*captured_->sim_work);
    return;
  }
#if defined(MT_WITH_CUDA)
  check_cuda(cudaGraphLaunch(captured_->exec, static_cast<cudaStream_t>(current_stream(device_).handle())), "launch");
#endif
}

int64_t CudaGraph::node_count() const {
  if (!captured()) return 0;
  if (device_.is_sim()) return static_cast<int64_t>(captured_->sim_work->nodes.size());
#if defined(MT_WITH_CUDA)
  size_t count = 0;
  check_cuda(cudaGraphGetNodes(captured_->graph, nullptr, &count), "count nodes");
  return static_cast<int64_t>(count);
#else
  return 0;
#endif
}

}  // namespace mt
