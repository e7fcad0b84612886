#include "tools/train/device_feed.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace mt::tools {

// ---------------------------------------------------------------- BatchStager

namespace {

// `per_sample`'s shape with its leading (sample) dimension set to `n`.
Shape with_batch(const Tensor& per_sample, int64_t n) {
  Shape shape = per_sample.sizes();
  shape[0] = n;
  return shape;
}

bool same_sample_layout(const Tensor& batch, const Tensor& buffer) {
  return batch.dim() == buffer.dim() && batch.dtype() == buffer.dtype() &&
         std::equal(batch.sizes().begin() + 1, batch.sizes().end(), buffer.sizes().begin() + 1);
}

}  // namespace

BatchStager::BatchStager(Device device, const data::TensorDataset& dataset, int64_t max_batch) : device_(device) {
  if (device.is_cpu()) return;  // CPU batches are used where they are
  copy_stream_ = Stream::create(device);
  const MemoryCategoryScope data_memory(MemoryCategory::Data);
  const Shape inputs = with_batch(dataset.inputs, max_batch), targets = with_batch(dataset.targets, max_batch);
  for (Slot& s : slots_) {
    s.host_inputs = empty_pinned(inputs, dataset.inputs.dtype());
    s.host_targets = empty_pinned(targets, dataset.targets.dtype());
    s.device_inputs = empty(inputs, dataset.inputs.dtype(), device);
    s.device_targets = empty(targets, dataset.targets.dtype(), device);
    s.copied = std::make_unique<Event>(device);
    s.released = std::make_unique<Event>(device);
  }
}

BatchStager::OnDevice BatchStager::upload(const data::Batch& batch) {
  if (device_.is_cpu()) return {batch.inputs, batch.targets};
  const Stream compute = current_stream(device_);
  // Everything queued so far reads the previous slot: mark where that ends.
  if (previous_) slots_[*previous_].released->record(compute);
  Slot& s = slots_[next_];
  const int64_t n = batch.targets.size(0);
  MT_CHECK(batch.inputs.size(0) == n && n <= s.host_targets.size(0) &&
               same_sample_layout(batch.inputs, s.host_inputs) && same_sample_layout(batch.targets, s.host_targets),
           "BatchStager: a batch of {} {} inputs and {} {} targets does not fit buffers of {} {} inputs and {} {} "
           "targets",
           batch.inputs.shape_string(), batch.inputs.dtype(), batch.targets.shape_string(), batch.targets.dtype(),
           s.host_inputs.shape_string(), s.host_inputs.dtype(), s.host_targets.shape_string(), s.host_targets.dtype());
  // The pinned buffer may still be feeding this slot's last upload.
  if (s.used && !s.copied->query()) s.copied->synchronize();
  const Tensor host_inputs = s.host_inputs.narrow(0, 0, n), host_targets = s.host_targets.narrow(0, 0, n);
  std::memcpy(host_inputs.data_ptr(), batch.inputs.contiguous().data_ptr(), host_inputs.nbytes());
  std::memcpy(host_targets.data_ptr(), batch.targets.contiguous().data_ptr(), host_targets.nbytes());
  const Tensor device_inputs = s.device_inputs.narrow(0, 0, n), device_targets = s.device_targets.narrow(0, 0, n);
  // Overwrite the device buffer only after the steps that read it are done.
  if (s.used) copy_stream_.wait(*s.released);
  copy_async(device_inputs, host_inputs, copy_stream_);
  copy_async(device_targets, host_targets, copy_stream_);
  s.copied->record(copy_stream_);
  compute.wait(*s.copied);
  s.used = true;
  previous_ = next_;
  next_ = (next_ + 1) % slots_.size();
  return {device_inputs, device_targets};
}

// ---------------------------------------------------------------- StepMetrics

namespace {
constexpr int64_t kLoss = 0, kGradNorm = 1, kFoundInf = 2, kScale = 3, kLrFactor = 4, kRowSize = 5;
}  // namespace

StepMetrics::StepMetrics(Device device, size_t ring_size) : device_(device), ring_size_(ring_size) {}

void StepMetrics::stage(const StepValues& host_part, const Tensor& loss, const Tensor& grad_norm,
                        const Tensor& found_inf, const Tensor& scale, const Tensor& lr_factor,
                        const Tensor& nonfinite) {
  if (pending_.size() >= ring_size_) {
    // The host is a whole ring ahead: wait for the oldest step (a counted sync).
    pending_.front().ready->synchronize();
    retire_front();
  }
  const int64_t flags = nonfinite.defined() ? nonfinite.numel() : 0;
  Entry e;
  if (!free_.empty() && free_.back().flags == flags) {
    e = std::move(free_.back());
    free_.pop_back();
  } else {
    e.flags = flags;
    e.device_row = empty({kRowSize + flags}, kF64, device_);
    e.host_row = device_.is_cpu() ? e.device_row : empty_pinned({kRowSize + flags}, kF64);
    e.ready = std::make_unique<Event>(device_);
  }
  e.values = host_part;
  NoGradGuard no_grad;
  // Gathered on the device by small cast-copy kernels; absent values are not
  // copied, and read() gives them their defaults.
  const Tensor* fields[kRowSize] = {&loss, &grad_norm, &found_inf, &scale, &lr_factor};
  for (int64_t column = 0; column < kRowSize; ++column) {
    const Tensor& value = *fields[column];
    e.present[static_cast<size_t>(column)] = value.defined();
    if (value.defined()) copy_(e.device_row.narrow(0, column, 1), value.reshape({1}));
  }
  if (flags > 0) copy_(e.device_row.narrow(0, kRowSize, flags), nonfinite.reshape({flags}));
  const Stream stream = current_stream(device_);
  if (!device_.is_cpu()) copy_async(e.host_row, e.device_row, stream);
  e.ready->record(stream);
  pending_.push_back(std::move(e));
}

StepValues StepMetrics::read(const Entry& e) const {
  const auto* row = static_cast<const double*>(e.host_row.data_ptr());
  auto value_or = [&](int64_t column, double absent) {
    return e.present[static_cast<size_t>(column)] ? row[column] : absent;
  };
  StepValues v = e.values;
  v.loss = value_or(kLoss, NAN);
  v.grad_norm = value_or(kGradNorm, NAN);
  v.skipped = value_or(kFoundInf, 0.0) != 0.0;
  v.scale = value_or(kScale, 1.0);
  v.lr_factor = value_or(kLrFactor, 1.0);
  v.nonfinite.resize(static_cast<size_t>(e.flags));
  for (int64_t i = 0; i < e.flags; ++i) v.nonfinite[static_cast<size_t>(i)] = row[kRowSize + i] != 0.0;
  return v;
}

void StepMetrics::retire_front() {
  arrived_.push_back(read(pending_.front()));
  free_.push_back(std::move(pending_.front()));
  pending_.pop_front();
}

std::vector<StepValues> StepMetrics::poll() {
  while (!pending_.empty() && pending_.front().ready->query()) retire_front();
  return std::exchange(arrived_, {});
}

std::vector<StepValues> StepMetrics::flush() {
  if (!pending_.empty()) pending_.back().ready->synchronize();
  return poll();
}

}  // namespace mt::tools
