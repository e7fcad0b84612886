// CUDA graphs: capture the device work of a whole training step once, replay it every step.
//
// A step of a small model is hundreds of short kernels; launching them one by
// one from the host costs more than running them. A CUDA graph records the
// launches once and replays them with a single call. Capture is
// cudaStreamBeginCapture on a stream of the graph's own; on the sim device the
// simulator records the launches the same way (runtime/sim/runtime.h), so CI
// proves the step is capturable without a GPU.
//
// What capture requires of the captured code, on both devices:
//   * nothing runs during capture, so the host may not read device values or
//     wait for the device: any host sync is an mt::Error naming the operation
//     (core/host_sync.h);
//   * every replay uses the addresses seen at capture: inputs must be copied
//     into static tensors before replay(), outputs read from the tensors the
//     capture produced, and state that persists across steps (parameters,
//     optimizer moments, the loss scale, step counters) updated in place;
//   * scalars passed by value are baked in (use device tensors for anything
//     that changes per step, as the lr factor and the loss scale are);
//   * ops that draw host-side random offsets (dropout) refuse to be
//     captured: their replays would repeat one random pattern. (The
//     optimizers' stochastic rounding keys its bits by the device-side step.)
// Memory allocated during capture comes from the graph's private pool in the
// caching allocator and stays reserved while the graph lives.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/stream.h"

namespace mt {

class CudaGraph {
 public:
  explicit CudaGraph(Device device);  // the sim device or a GPU
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Runs `body` with the graph's stream as the current stream and records the
  // device work it queues; nothing executes until replay(). On an exception
  // the partial capture is discarded and the graph stays empty.
  void capture(const std::function<void()>& body);
  // Queues the captured work on the current stream (no host sync).
  void replay();
  // Frees the captured graph and its private memory.
  void reset();

  bool captured() const;
  // Recorded operations (kernel launches and copies).
  int64_t node_count() const;
  Device device() const { return device_; }

 private:
  struct Captured;
  Device device_;
  Stream stream_;
  std::unique_ptr<Captured> captured_;
};

// True while this thread is inside CudaGraph::capture (for ops that cannot be captured).
bool graph_capture_active();

}  // namespace mt
