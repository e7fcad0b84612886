#include "core/stream.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/host_sync.h"
#include "runtime/sim/runtime.h"

#if defined(MT_WITH_CUDA)
#include <cuda_runtime.h>

#include "core/device_info.h"
#endif

namespace mt {
namespace {

// Current stream per device type (CUDA and SIM); the CPU has only its default.
thread_local std::array<Stream, 3> current_streams;
std::atomic<uint64_t> next_sim_stream{1};

size_t slot(Device d) { return static_cast<size_t>(d.type); }

double host_now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#if defined(MT_WITH_CUDA)
void check_cuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) fail("{}: {}", what, cudaGetErrorString(error));
}
#endif

[[noreturn, maybe_unused]] void no_cuda(const char* what) {
  fail("{}: no CUDA device available: this build of mixtape has no CUDA support; use the cpu or sim device", what);
}

}  // namespace

Stream Stream::create(Device device) {
  if (device.is_cpu()) return Stream();
  if (device.is_sim()) return Stream(device, reinterpret_cast<void*>(next_sim_stream.fetch_add(1)));
#if defined(MT_WITH_CUDA)
  allocator_for(device);  // a clear error when the GPU is missing
  check_cuda(cudaSetDevice(device.index), "Stream::create: cudaSetDevice");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "Stream::create");
  return Stream(device, stream);
#else
  no_cuda("Stream::create");
#endif
}

void Stream::synchronize() const {
  note_host_sync(device_, "Stream::synchronize");
  if (device_.is_sim()) simulator::run_deferred_until(id(), simulator::deferred_position(id()));
  if (!device_.is_cuda()) return;
#if defined(MT_WITH_CUDA)
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)), "Stream::synchronize");
#endif
}

Stream current_stream(Device device) {
  const Stream& s = current_streams[slot(device)];
  return s.device() == device ? s : Stream::default_stream(device);
}

StreamGuard::StreamGuard(const Stream& stream)
    : device_(stream.device()), previous_(current_streams[slot(stream.device())]) {
  current_streams[slot(device_)] = stream;
}

StreamGuard::~StreamGuard() { current_streams[slot(device_)] = previous_; }

void synchronize(Device device) {
  note_host_sync(device, "synchronize");
  if (device.is_sim()) simulator::run_all_deferred();
  if (!device.is_cuda()) return;
#if defined(MT_WITH_CUDA)
  check_cuda(cudaSetDevice(device.index), "synchronize: cudaSetDevice");
  check_cuda(cudaDeviceSynchronize(), "synchronize");
#endif
}

Event::Event(Device device) : device_(device) {
  if (!device.is_cuda()) return;
#if defined(MT_WITH_CUDA)
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreate(&event), "Event");
  handle_ = event;
#else
  no_cuda("Event");
#endif
}

Event::~Event() {
#if defined(MT_WITH_CUDA)
  if (handle_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
#endif
}

void Event::record(const Stream& stream) {
  MT_CHECK(stream.device().type == device_.type, "Event::record: event on {} but stream on {}", device_,
           stream.device());
  host_ms_ = host_now_ms();
  const bool deferred = stream.device().is_sim() && simulator::defers(stream.id());
  sim_stream_ = deferred ? stream.id() : 0;
  sim_position_ = deferred ? simulator::deferred_position(stream.id()) : 0;
#if defined(MT_WITH_CUDA)
  if (handle_ != nullptr) {
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(stream.handle())),
               "Event::record");
  }
#endif
}

void Event::synchronize() const {
  note_host_sync(device_, "Event::synchronize");
  if (sim_stream_ != 0) simulator::run_deferred_until(sim_stream_, sim_position_);
#if defined(MT_WITH_CUDA)
  if (handle_ != nullptr) check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)), "Event::synchronize");
#endif
}

bool Event::query() const {
#if defined(MT_WITH_CUDA)
  if (handle_ != nullptr) {
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
    if (status == cudaErrorNotReady) return false;
    check_cuda(status, "Event::query");
  }
#endif
  // sim and CPU work is done when its call returns; held sim work is run now.
  if (sim_stream_ != 0) simulator::run_deferred_until(sim_stream_, sim_position_);
  return true;
}

void Stream::wait(const Event& event) const {
  if (device_.is_sim() && event.sim_stream_ != 0) {
    // Held work before the event runs when this stream reaches the wait.
    const uint64_t stream = event.sim_stream_, position = event.sim_position_;
    if (simulator::defers(id())) {
      simulator::record_node(id(), "wait", [stream, position] { simulator::run_deferred_until(stream, position); });
    } else {
      simulator::run_deferred_until(stream, position);
    }
  }
  if (!device_.is_cuda()) return;  // otherwise sim and CPU streams run in issue order already
#if defined(MT_WITH_CUDA)
  if (event.handle() != nullptr) {
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(handle_), static_cast<cudaEvent_t>(event.handle()), 0),
               "Stream::wait");
  }
#endif
}

double Event::elapsed_ms(const Event& end) const {
  MT_CHECK(host_ms_ >= 0 && end.host_ms_ >= 0, "Event::elapsed_ms: both events must be recorded first");
#if defined(MT_WITH_CUDA)
  if (handle_ != nullptr && end.handle_ != nullptr) {
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle_), static_cast<cudaEvent_t>(end.handle_)),
               "Event::elapsed_ms");
    return ms;
  }
#endif
  return end.host_ms_ - host_ms_;
}

// ---------------------------------------------------------------- asynchronous copies

bool is_pinned(const Tensor& t) { return &t.storage()->allocator() == &pinned_host_allocator(); }

void copy_async(const Tensor& dst, const Tensor& src, const Stream& stream) {
  MT_CHECK(dst.defined() && src.defined() && dst.dtype() == src.dtype() && dst.sizes() == src.sizes() &&
               dst.is_contiguous() && src.is_contiguous(),
           "copy_async: expected contiguous tensors of one shape and dtype, got {} {} and {} {}", dst.shape_string(),
           dst.dtype(), src.shape_string(), src.dtype());
  const bool to_device = dst.device().is_cpu() != src.device().is_cpu() && src.device().is_cpu();
  const Tensor& host = to_device ? src : dst;
  const Device device = to_device ? dst.device() : src.device();
  MT_CHECK(host.device().is_cpu() && !device.is_cpu(),
           "copy_async: copies between the host and a device only, got {} -> {}", src.device(), dst.device());
  MT_CHECK(stream.device() == device, "copy_async: stream on {} but the copy involves {}", stream.device(), device);
  if (dst.nbytes() == 0) return;
  // From or to pageable memory the driver stages the copy and the host waits.
  if (!is_pinned(host)) note_host_sync(device, "an asynchronous copy from or to pageable host memory");
  if (device.is_sim()) {
    void* to = dst.data_ptr();
    const void* from = src.data_ptr();
    const size_t bytes = dst.nbytes();
    if (simulator::records_work(stream.id(), "copy_async")) {
      simulator::record_node(stream.id(), "memcpy", [to, from, bytes] { std::memcpy(to, from, bytes); });
    } else {
      std::memcpy(to, from, bytes);
    }
  } else {
#if defined(MT_WITH_CUDA)
    check_cuda(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDefault,
                               static_cast<cudaStream_t>(stream.handle())),
               "copy_async: cudaMemcpyAsync");
#else
    no_cuda("copy_async");
#endif
  }
  dst.storage()->bump_version();
}

// ---------------------------------------------------------------- pinned memory

bool pinned_memory_available() {
#if defined(MT_WITH_CUDA)
  static const bool available = cuda::query_devices().count > 0;
  return available;
#else
  return false;
#endif
}

namespace {

class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* ptr = nullptr;
#if defined(MT_WITH_CUDA)
    if (pinned_memory_available()) {
      check_cuda(cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault), "pinned host allocation");
      stats_.on_allocate(bytes);
      return ptr;
    }
#endif
    ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    MT_CHECK(ptr != nullptr, "out of host memory: asked for {} bytes of (pinned) staging memory", bytes);
    stats_.on_allocate(bytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t bytes) override {
    if (ptr == nullptr) return;
#if defined(MT_WITH_CUDA)
    if (pinned_memory_available()) {
      note_host_sync(kCUDA, "freeing pinned host memory (cudaFreeHost waits for the device)");
      cudaFreeHost(ptr);
      stats_.on_deallocate(bytes);
      return;
    }
#endif
    std::free(ptr);
    stats_.on_deallocate(bytes);
  }
  Device device() const override { return kCPU; }
  AllocatorStats stats() const override { return stats_.snapshot(); }
  void reset_peak() override { stats_.reset_peak(); }

 private:
  StatsCounter stats_;
};

}  // namespace

Allocator& pinned_host_allocator() {
  static auto* allocator = new PinnedHostAllocator();  // never destroyed: storages may outlive statics
  return *allocator;
}

Tensor empty_pinned(const Shape& shape, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * element_size(dtype), kCPU,
                                            pinned_host_allocator());
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->device = kCPU;
  return Tensor(std::move(impl));
}

}  // namespace mt
