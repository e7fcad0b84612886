#include "tools/device_feed.h"

#include <cmath>
#include <cstring>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace mt::tools {

// ---------------------------------------------------------------- BatchStager

BatchStager::BatchStager(Device device, const Shape& sample_shape, int64_t max_batch) : device_(device) {
  if (device.is_cpu()) return;  // CPU batches are used where they are
  copy_stream_ = Stream::create(device);
  Shape images = sample_shape;
  images.insert(images.begin(), max_batch);
  for (Slot& s : slots_) {
    s.host_images = empty_pinned(images, kF32);
    s.host_labels = empty_pinned({max_batch}, kI64);
    s.device_images = empty(images, kF32, device);
    s.device_labels = empty({max_batch}, kI64, device);
    s.copied = std::make_unique<Event>(device);
    s.released = std::make_unique<Event>(device);
  }
}

BatchStager::OnDevice BatchStager::upload(const data::Batch& batch) {
  if (device_.is_cpu()) return {batch.images, batch.labels};
  const Stream compute = current_stream(device_);
  // Everything queued so far reads the previous slot: mark where that ends.
  if (previous_) slots_[*previous_].released->record(compute);
  Slot& s = slots_[next_];
  const int64_t n = batch.labels.numel();
  MT_CHECK(n <= s.host_labels.numel() && batch.images.sizes().size() == s.host_images.sizes().size(),
           "BatchStager: a batch of {} samples {} does not fit buffers of {}", n, batch.images.shape_string(),
           s.host_images.shape_string());
  // The pinned buffer may still be feeding this slot's last upload.
  if (s.used && !s.copied->query()) s.copied->synchronize();
  const Tensor host_images = s.host_images.narrow(0, 0, n), host_labels = s.host_labels.narrow(0, 0, n);
  std::memcpy(host_images.data_ptr(), batch.images.contiguous().data_ptr(), host_images.nbytes());
  std::memcpy(host_labels.data_ptr(), batch.labels.contiguous().data_ptr(), host_labels.nbytes());
  const Tensor device_images = s.device_images.narrow(0, 0, n), device_labels = s.device_labels.narrow(0, 0, n);
  // Overwrite the device buffer only after the steps that read it are done.
  if (s.used) copy_stream_.wait(*s.released);
  copy_async(device_images, host_images, copy_stream_);
  copy_async(device_labels, host_labels, copy_stream_);
  s.copied->record(copy_stream_);
  compute.wait(*s.copied);
  s.used = true;
  previous_ = next_;
  next_ = (next_ + 1) % slots_.size();
  return {device_images, device_labels};
}

// ---------------------------------------------------------------- StepMetrics

namespace {
constexpr int64_t kLoss = 0, kGradNorm = 1, kFoundInf = 2, kScale = 3, kLrFactor = 4, kRowSize = 5;
}  // namespace

StepMetrics::StepMetrics(Device device, size_t ring_size) : device_(device), ring_size_(ring_size) {}

void StepMetrics::stage(const StepValues& host_part, const Tensor& loss, const Tensor& grad_norm,
                        const Tensor& found_inf, const Tensor& scale, const Tensor& lr_factor) {
  if (pending_.size() >= ring_size_) {
    // The host is a whole ring ahead: wait for the oldest step (a counted sync).
    pending_.front().ready->synchronize();
  }
  Entry e;
  if (!free_.empty()) {
    e = std::move(free_.back());
    free_.pop_back();
  } else {
    e.device_row = empty({kRowSize}, kF64, device_);
    e.host_row = device_.is_cpu() ? e.device_row : empty_pinned({kRowSize}, kF64);
    e.ready = std::make_unique<Event>(device_);
  }
  e.values = host_part;
  NoGradGuard no_grad;
  // Gathered on the device (small cast-copy kernels), absent values as NaN.
  const std::pair<int64_t, const Tensor*> fields[] = {
      {kLoss, &loss}, {kGradNorm, &grad_norm}, {kFoundInf, &found_inf}, {kScale, &scale}, {kLrFactor, &lr_factor}};
  for (const auto& [column, value] : fields) {
    const Tensor cell = e.device_row.narrow(0, column, 1);
    if (value->defined()) {
      copy_(cell, value->reshape({1}));
    } else {
      fill_(cell, NAN);
    }
  }
  const Stream stream = current_stream(device_);
  if (!device_.is_cpu()) copy_async(e.host_row, e.device_row, stream);
  e.ready->record(stream);
  pending_.push_back(std::move(e));
}

StepValues StepMetrics::read(const Entry& e) const {
  const auto* row = static_cast<const double*>(e.host_row.data_ptr());
  StepValues v = e.values;
  v.loss = row[kLoss];
  v.grad_norm = row[kGradNorm];
  v.skipped = !std::isnan(row[kFoundInf]) && row[kFoundInf] != 0.0;
  v.scale = std::isnan(row[kScale]) ? 1.0 : row[kScale];
  v.lr_factor = std::isnan(row[kLrFactor]) ? 1.0 : row[kLrFactor];
  return v;
}

std::vector<StepValues> StepMetrics::poll() {
  std::vector<StepValues> out;
  while (!pending_.empty() && pending_.front().ready->query()) {
    out.push_back(read(pending_.front()));
    free_.push_back(std::move(pending_.front()));
    pending_.pop_front();
  }
  return out;
}

std::vector<StepValues> StepMetrics::flush() {
  if (!pending_.empty()) pending_.back().ready->synchronize();
  return poll();
}

}  // namespace mt::tools
