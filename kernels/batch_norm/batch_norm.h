// Batch normalisation over x viewed as [N, C, S] (S = the spatial elements),
// one set of statistics per channel. Statistics are computed in f32 (f64 for
// f64 inputs). weight/bias and running buffers may be undefined tensors.
//
// CPU tensors run kernels/batch_norm/cpu.cpp; SIM and CUDA tensors run
// kernels/batch_norm/cuda.cu on contiguous buffers: x/y/dy/dx in x's dtype;
// weight, bias, running stats and the per-channel gradients as f32 (f64 for
// f64 x) buffers, converted back to their own dtypes here.
#pragma once

#include "core/memory_ledger.h"
#include "kernels/batch_norm/cpu.h"
#include "kernels/batch_norm/api.h"
#include "kernels/common/dispatch_helpers.h"
#include "kernels/dispatch.h"

namespace mt::kernels {

namespace device_buffers {
struct BatchNormLayout {
  int64_t n, c, s;
};
inline BatchNormLayout batch_norm_layout(const Tensor& x) {
  MT_CHECK(x.dim() >= 2, "batch_norm kernel: expected [N, C, ...], got {}", x.shape_string());
  const int64_t n = x.size(0), c = x.size(1);
  return {n, c, n * c == 0 ? 0 : x.numel() / (n * c)};
}
// An in-place acc-dtype view of a running buffer: itself, or a converted copy
// (written back by finish_output).
inline Tensor inplace_as(const Tensor& t, DType dtype) { return contiguous_as(t, dtype); }
}  // namespace device_buffers

// The partial sums and per-channel sums the device kernels reduce through.
inline Tensor batch_norm_workspace(const device_buffers::BatchNormLayout& L, DType acc, Device device) {
  const MemoryCategoryScope scratch(MemoryCategory::Workspace);
  return empty({batch_norm_workspace_elements(L.c, L.n * L.s)}, acc, device);
}

inline void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                               const Tensor& running_var, const BatchNormArgs& args, const Tensor& y,
                               const Tensor& save_mean, const Tensor& save_invstd) {
  const Backend backend = backend_for(y.device(), "batch_norm");
  if (backend == Backend::Cpu) {
    return cpu::batch_norm_forward(x, weight, bias, running_mean, running_var, args, y, save_mean, save_invstd);
  }
  using namespace device_buffers;
  const BatchNormLayout L = batch_norm_layout(x);
  const DType dtype = x.dtype(), acc = accumulator_dtype(dtype);
  const KernelDType kd = kernel_dtype(dtype, "batch_norm");
  const Tensor vx = contiguous_as(x, dtype), vw = contiguous_as(weight, acc), vb = contiguous_as(bias, acc);
  const bool update = args.training;
  const Tensor rm = inplace_as(running_mean, acc), rv = inplace_as(running_var, acc);
  const Tensor vy = output_buffer(y, dtype), vmean = output_buffer(save_mean, acc),
               vinvstd = output_buffer(save_invstd, acc);
  const Stream stream = launch_stream(y.device());
  const Tensor workspace = batch_norm_workspace(L, acc, y.device());
  MT_DEVICE_CALL(backend, batch_norm_forward, kd, vx.data_ptr(), data_or_null(vw), data_or_null(vb),
                 mutable_data_or_null(rm), mutable_data_or_null(rv), args.training, args.momentum, args.eps,
                 vy.data_ptr(), vmean.data_ptr(), vinvstd.data_ptr(), workspace.data_ptr(), L.n, L.c, L.s, stream);
  finish_output(vy, y);
  finish_output(vmean, save_mean);
  finish_output(vinvstd, save_invstd);
  if (update) {
    finish_output(rm, running_mean);
    finish_output(rv, running_var);
  }
}

inline void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                const Tensor& save_invstd, bool training, const Tensor& dx, const Tensor& dweight,
                                const Tensor& dbias) {
  const Backend backend = backend_for(x.device(), "batch_norm_backward");
  if (backend == Backend::Cpu) {
    return cpu::batch_norm_backward(dy, x, weight, save_mean, save_invstd, training, dx, dweight, dbias);
  }
  using namespace device_buffers;
  const BatchNormLayout L = batch_norm_layout(x);
  const DType dtype = x.dtype(), acc = accumulator_dtype(dtype);
  const KernelDType kd = kernel_dtype(dtype, "batch_norm_backward");
  const Tensor vdy = contiguous_as(dy, dtype), vx = contiguous_as(x, dtype), vw = contiguous_as(weight, acc);
  const Tensor vmean = contiguous_as(save_mean, acc), vinvstd = contiguous_as(save_invstd, acc);
  const Tensor vdx = output_buffer(dx, dtype), vdw = output_buffer(dweight, acc), vdb = output_buffer(dbias, acc);
  const Tensor workspace = batch_norm_workspace(L, acc, x.device());
  const Stream stream = launch_stream(x.device());
  MT_DEVICE_CALL(backend, batch_norm_backward, kd, vdy.data_ptr(), vx.data_ptr(), data_or_null(vw), vmean.data_ptr(),
                 vinvstd.data_ptr(), training, mutable_data_or_null(vdx), mutable_data_or_null(vdw),
                 mutable_data_or_null(vdb), workspace.data_ptr(), L.n, L.c, L.s, stream);
  finish_output(vdx, dx);
  finish_output(vdw, dweight);
  finish_output(vdb, dbias);
}

// Commits a staged running-statistics update (nn::BatchNorm2d's
// stage_statistics): unless found_inf (f32, one element, optional: undefined
// commits) is non-zero, running_mean / running_var = staged_mean / staged_var
// and num_batches_tracked (i64, one element, optional) += batches. The flag is
// read where it lives, by the kernel: no host read of a device value, so the
// commit is sync-free and can be captured in a CUDA graph.
inline void batch_norm_commit_unless(const Tensor& found_inf, const Tensor& staged_mean, const Tensor& staged_var,
                                     const Tensor& running_mean, const Tensor& running_var,
                                     const Tensor& num_batches_tracked, int64_t batches) {
  const Tensor& any = running_mean.defined() ? running_mean : running_var;
  MT_CHECK(any.defined(), "batch_norm_commit_unless: no running statistics to commit");
  MT_CHECK(!found_inf.defined() || (found_inf.dtype() == kF32 && found_inf.numel() == 1),
           "batch_norm_commit_unless: found_inf must be one f32 flag (the GradScaler's), got {} {}",
           found_inf.defined() ? dtype_name(found_inf.dtype()) : "", found_inf.defined() ? found_inf.shape_string() : "");
  MT_CHECK(!num_batches_tracked.defined() || (num_batches_tracked.dtype() == kI64 && num_batches_tracked.numel() == 1),
           "batch_norm_commit_unless: num_batches_tracked must be one i64 counter");
  for (const Tensor* t : {&found_inf, &staged_mean, &staged_var, &running_var, &num_batches_tracked}) {
    MT_CHECK(!t->defined() || t->device() == any.device(),
             "batch_norm_commit_unless: every tensor must be on {}, found one on {}", any.device(),
             t->defined() ? t->device() : any.device());
  }
  const Backend backend = backend_for(any.device(), "batch_norm_commit_unless");
  if (backend == Backend::Cpu) {
    return cpu::batch_norm_commit_unless(found_inf, staged_mean, staged_var, running_mean, running_var,
                                         num_batches_tracked, batches);
  }
  using namespace device_buffers;
  const DType acc = accumulator_dtype(any.dtype());
  const Tensor vflag = contiguous_as(found_inf, kF32);
  const Tensor sm = contiguous_as(staged_mean, acc), sv = contiguous_as(staged_var, acc);
  const Tensor rm = inplace_as(running_mean, acc), rv = inplace_as(running_var, acc);
  const Tensor count = num_batches_tracked.defined() ? num_batches_tracked.contiguous() : Tensor();
  MT_CHECK(!count.defined() || count.is_same(num_batches_tracked),
           "batch_norm_commit_unless: num_batches_tracked must be contiguous");
  MT_DEVICE_CALL(backend, batch_norm_commit_unless, kernel_dtype(acc, "batch_norm_commit_unless"),
                 static_cast<const float*>(data_or_null(vflag)), data_or_null(sm), data_or_null(sv),
                 mutable_data_or_null(rm), mutable_data_or_null(rv),
                 static_cast<long long*>(mutable_data_or_null(count)), batches, any.size(0), launch_stream(any.device()));
  finish_output(rm, running_mean);
  finish_output(rv, running_var);
  if (count.defined()) mark_written(num_batches_tracked);
}

}  // namespace mt::kernels
