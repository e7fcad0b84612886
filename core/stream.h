// Streams, events, device synchronisation and pinned host memory.
//
// A Stream is a queue of device work: on a GPU a cudaStream_t, on the sim
// device (which runs every kernel synchronously) just an id, so code written
// against streams runs unchanged in CI. (A test can make sim hold each
// stream's work until something waits for it, so a missing wait shows:
// simulator::begin_deferred_streams.) Kernels launch on the calling
// thread's current stream (StreamGuard changes it), and the caching allocator
// reuses a freed block only on the stream it was allocated on.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mt {

class Event;

class Stream {
 public:
  Stream() = default;  // the default stream of the CPU (a no-op)
  // A new stream on `device` (non-blocking with respect to the default stream on a GPU).
  static Stream create(Device device);
  static Stream default_stream(Device device) { return Stream(device, nullptr); }

  Device device() const { return device_; }
  void* handle() const { return handle_; }  // cudaStream_t on a GPU, an id on sim, null for the default
  uint64_t id() const { return reinterpret_cast<uint64_t>(handle_); }
  void synchronize() const;  // waits until the work queued so far has finished (a host sync)
  // Work queued on this stream from now on waits for `event` (the host does not wait).
  void wait(const Event& event) const;
  friend bool operator==(const Stream& a, const Stream& b) { return a.device_ == b.device_ && a.handle_ == b.handle_; }

 private:
  Stream(Device device, void* handle) : device_(device), handle_(handle) {}
  Device device_;
  void* handle_ = nullptr;
};

// The calling thread's current stream on `device` (the default stream unless a StreamGuard is active).
Stream current_stream(Device device);

class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  Stream previous_;
};

// Waits for all work queued on `device` (a host sync; nothing to wait for on the CPU and sim).
void synchronize(Device device);

// Copies a contiguous tensor between the host and a device on `stream`
// without the host waiting, when the host side is pinned (empty_pinned);
// from pageable memory the copy is staged and counted as a host sync. The
// host tensor must stay alive and unchanged until the copy has run (record
// an Event after it).
void copy_async(const Tensor& dst, const Tensor& src, const Stream& stream);
bool is_pinned(const Tensor& t);

// A point in a stream's work, for ordering and timing. On sim it records the
// host clock (kernels there finish before launch returns).
class Event {
 public:
  explicit Event(Device device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& stream);
  void synchronize() const;  // a host sync
  // True when the work before the last record() has finished; never waits.
  bool query() const;
  void* handle() const { return handle_; }
  // Milliseconds from this event to `end` (both recorded).
  double elapsed_ms(const Event& end) const;

 private:
  friend class Stream;  // Stream::wait reads where a deferred sim stream's event stands

  Device device_;
  void* handle_ = nullptr;  // cudaEvent_t on a GPU
  double host_ms_ = -1;     // sim and CPU: the host clock at record()
  // sim, when the simulator defers streams: the stream recorded on and how
  // much of its work comes before this event (runtime/sim/runtime.h).
  uint64_t sim_stream_ = 0, sim_position_ = 0;
};

// Page-locked host memory (cudaHostAlloc) when a GPU is present: copies from
// it to the GPU are faster and can overlap compute. Elsewhere ordinary memory.
Allocator& pinned_host_allocator();
Tensor empty_pinned(const Shape& shape, DType dtype = kF32);
bool pinned_memory_available();

}  // namespace mt
