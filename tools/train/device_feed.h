// Keeping the host ahead of the device during training.
//
// BatchStager moves each batch to the device without the host waiting: the
// batch is copied into one of two pinned host buffers, then by an
// asynchronous copy on a copy stream into one of two static device buffers,
// while the previous step still computes; the compute stream waits for the
// copy on the device (an event), not on the host. The static buffers are
// also what a CUDA graph needs: its inputs live at fixed addresses.
//
// StepMetrics reads each step's loss, gradient norm, skip flag, loss scale
// and lr factor back without the host waiting: the values are gathered into
// a small device row, copied asynchronously into a ring of pinned rows, and
// read when their event has completed (Event::query never waits). Only when
// the ring is full, or at flush(), does the host wait (a counted sync).
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "core/stream.h"
#include "tools/data/loader.h"

namespace mt::tools {

class BatchStager {
 public:
  // Buffers for batches of up to `max_batch` samples of `dataset` (each
  // input and target shaped and typed like the dataset's).
  BatchStager(Device device, const data::TensorDataset& dataset, int64_t max_batch);
  BatchStager(const BatchStager&) = delete;
  BatchStager& operator=(const BatchStager&) = delete;

  struct OnDevice {
    Tensor inputs;   // [B, ...], a view of a static buffer (or the batch itself on the CPU)
    Tensor targets;  // i64 [B, ...]
  };
  // Queues the upload of `batch`; the returned tensors are ready for kernels
  // queued afterwards on the current stream. A staged batch stays valid until
  // the upload after next.
  OnDevice upload(const data::Batch& batch);

 private:
  struct Slot {
    Tensor host_inputs, host_targets;      // pinned
    Tensor device_inputs, device_targets;  // static device buffers
    std::unique_ptr<Event> copied;         // the upload into this slot has finished
    std::unique_ptr<Event> released;       // the steps that read this slot have finished
    bool used = false;
  };
  Device device_;
  Stream copy_stream_;
  std::array<Slot, 2> slots_;
  size_t next_ = 0;
  std::optional<size_t> previous_;
};

// One optimizer step's values as the host reads them back.
struct StepValues {
  int64_t step = 0, epoch = 0, batch = 0;
  double loss = 0;
  double grad_norm = 0;  // NaN when not clipped
  bool skipped = false;
  double scale = 1;
  double lr_factor = 1;
  std::vector<bool> nonfinite{};  // --explain-skips: per parameter, its gradient held inf/NaN
};

class StepMetrics {
 public:
  StepMetrics(Device device, size_t ring_size = 64);
  StepMetrics(const StepMetrics&) = delete;
  StepMetrics& operator=(const StepMetrics&) = delete;

  // Queues the read-back of one step's device scalars (any may be undefined)
  // and, optionally, its per-parameter non-finite flags (f32 [n]).
  void stage(const StepValues& host_part, const Tensor& loss, const Tensor& grad_norm, const Tensor& found_inf,
             const Tensor& scale, const Tensor& lr_factor, const Tensor& nonfinite = Tensor());
  // The staged steps whose values have arrived, in step order; never waits
  // unless the ring is full.
  std::vector<StepValues> poll();
  // Every staged step (waits for the device: a host sync).
  std::vector<StepValues> flush();

 private:
  struct Entry {
    StepValues values;
    Tensor device_row;            // f64 [5 + flags]
    Tensor host_row;              // pinned f64 [5 + flags]
    int64_t flags = 0;            // nonfinite flags after the five values
    std::array<bool, 5> present;  // which of the five values the step had
    std::unique_ptr<Event> ready;
  };
  StepValues read(const Entry& e) const;
  void retire_front();  // reads the oldest (finished) entry into arrived_ and recycles it
  Device device_;
  size_t ring_size_;
  std::deque<Entry> pending_;
  std::vector<Entry> free_;
  std::vector<StepValues> arrived_;  // read while staging (ring full), not yet returned
};

}  // namespace mt::tools
