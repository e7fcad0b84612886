#include "amp/grad_state.h"

#include <map>
#include <mutex>
#include <set>

namespace mt::amp {
namespace {

struct ScalerRecord {
  bool scaled = false;
  std::set<const TensorImpl*> unscaled_params;
};

std::mutex mutex;
std::map<const void*, ScalerRecord> records;

}  // namespace

void note_loss_scaled(const void* scaler) {
  std::lock_guard lock(mutex);
  records[scaler].scaled = true;
}

void note_unscaled(const void* scaler, const std::vector<Tensor>& params) {
  std::lock_guard lock(mutex);
  for (const Tensor& p : params) records[scaler].unscaled_params.insert(p.impl());
}

void note_scaler_reset(const void* scaler) {
  std::lock_guard lock(mutex);
  records.erase(scaler);
}

void check_gradients_unscaled(const std::vector<Tensor>& params, const char* op) {
  std::lock_guard lock(mutex);
  for (const auto& [scaler, record] : records) {
    if (!record.scaled) continue;
    for (const Tensor& p : params) {
      if (!p.grad().defined() || record.unscaled_params.count(p.impl())) continue;
      fail(
          "{}: the gradients are still multiplied by the loss scale (GradScaler::scale(loss) was used but "
          "unscale_(optimizer) was not called for the optimizer of a parameter of shape {}). Call "
          "scaler.unscale_(optimizer) before clipping, then scaler.step(optimizer) and scaler.update().",
          op, p.shape_string());
    }
  }
}

}  // namespace mt::amp
