// Reductions: sum, mean, var, max/min (with indices), argmax, sum_to_size,
// and the running sum cumsum (a scan).
//
// Every reduction permutes its input to [kept dims..., reduced dims...] so the
// kernel sees independent rows; backward expands the gradient back over the
// reduced dims.
#include "autograd/autocast.h"
#include "autograd/op_helpers.h"
#include "kernels/indexing/indexing.h"
#include "kernels/reduce/reduce.h"

namespace mt {

using autograd::record;
using autograd::save;
using kernels::ReduceOp;

namespace {

struct ReductionPlan {
  Shape reduced;     // sorted dims being reduced
  Tensor rows_view;  // input permuted to [kept..., reduced...]
  int64_t rows = 1, cols = 1;
  Shape out_shape;      // with or without the reduced dims
  Shape keepdim_shape;  // reduced dims kept as 1
};

ReductionPlan plan_reduction(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  ReductionPlan p;
  p.reduced = autograd::normalize_dims(dims, x.dim(), op);
  Shape sizes, strides;
  std::vector<bool> is_reduced(static_cast<size_t>(x.dim()), false);
  for (int64_t d : p.reduced) is_reduced[static_cast<size_t>(d)] = true;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const auto i = static_cast<size_t>(d);
    p.keepdim_shape.push_back(is_reduced[i] ? 1 : x.sizes()[i]);
    if (is_reduced[i]) {
      if (keepdim) p.out_shape.push_back(1);
      continue;
    }
    sizes.push_back(x.sizes()[i]);
    strides.push_back(x.strides()[i]);
    p.out_shape.push_back(x.sizes()[i]);
    p.rows *= x.sizes()[i];
  }
  for (int64_t d : p.reduced) {
    sizes.push_back(x.sizes()[static_cast<size_t>(d)]);
    strides.push_back(x.strides()[static_cast<size_t>(d)]);
    p.cols *= x.sizes()[static_cast<size_t>(d)];
  }
  p.rows_view = make_view(x, sizes, strides, x.offset());
  return p;
}

// The gradient of a reduction broadcast back to the input's shape.
Tensor expand_grad(const Tensor& g, const Shape& keepdim_shape, const Shape& input_shape) {
  return g.reshape(keepdim_shape).expand(input_shape);
}

DType sum_result_type(DType t) { return is_floating(t) ? t : kI64; }

Tensor reduce(ReduceOp op, const Tensor& x, const ReductionPlan& p, DType dtype, double correction = 1) {
  Tensor out = empty(p.out_shape, dtype, x.device());
  kernels::reduce_rows(op, p.rows_view, out, {p.rows, p.cols, correction});
  return out;
}

}  // namespace

Tensor sum(const Tensor& x_in, const Shape& dims, bool keepdim) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::Sum, {x_in});
  const Tensor& x = in[0];
  const ReductionPlan p = plan_reduction(x, dims, keepdim, "sum");
  Tensor out = reduce(ReduceOp::Sum, x, p, sum_result_type(x.dtype()));
  if (!autograd::needs_grad({x})) return out;
  // saves: nothing (input shape only)
  return record(in, out, [kd = p.keepdim_shape, shape = x.sizes()](const Tensor& g) -> std::vector<Tensor> {
    return {expand_grad(g, kd, shape)};
  });
}

Tensor sum(const Tensor& x) { return sum(x, Shape{}, false); }

Tensor mean(const Tensor& x_in, const Shape& dims, bool keepdim) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::Mean, {x_in});
  const Tensor& x = in[0];
  autograd::check_floating("mean", x);
  const ReductionPlan p = plan_reduction(x, dims, keepdim, "mean");
  Tensor out = reduce(ReduceOp::Mean, x, p, x.dtype());
  if (!autograd::needs_grad({x})) return out;
  // saves: nothing (input shape and count only)
  return record(in, out, [kd = p.keepdim_shape, shape = x.sizes(), n = p.cols](const Tensor& g) -> std::vector<Tensor> {
    return {expand_grad(div(g, static_cast<double>(n)), kd, shape)};
  });
}

Tensor mean(const Tensor& x) { return mean(x, Shape{}, false); }

Tensor var(const Tensor& x_in, const Shape& dims, double correction, bool keepdim) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::Var, {x_in});
  const Tensor& x = in[0];
  autograd::check_floating("var", x);
  const ReductionPlan p = plan_reduction(x, dims, keepdim, "var");
  Tensor out = reduce(ReduceOp::Var, x, p, x.dtype(), correction);
  if (!autograd::needs_grad({x})) return out;
  // saves: input (f32 by policy)
  return record(in, out,
                [sx = save(x), kd = p.keepdim_shape, reduced = p.reduced, n = p.cols,
                 correction](const Tensor& g) -> std::vector<Tensor> {
                  // d var / dx_i = 2 (x_i - mean) / (n - correction)
                  const Tensor x_ = sx.get();
                  const Tensor centered = sub(x_, mean(x_, reduced, true));
                  const Tensor scale = div(g.reshape(kd), static_cast<double>(n) - correction);
                  return {mul(mul(centered, scale), 2.0)};
                });
}

Tensor var(const Tensor& x) { return var(x, Shape{}, 1.0, false); }

namespace {

ValuesIndices extreme(ReduceOp op, amp::Op policy, const Tensor& x_in, int64_t dim, bool keepdim) {
  const autograd::CastInputs in = autograd::autocast_inputs(policy, {x_in});
  const Tensor& x = in[0];
  const char* name = in.name();
  const int64_t d = wrap_dim(dim, x.dim(), name);
  const ReductionPlan p = plan_reduction(x, {d}, keepdim, name);
  Tensor values = empty(p.out_shape, x.dtype(), x.device());
  Tensor indices = empty(p.out_shape, kI64, x.device());
  kernels::reduce_rows_with_index(op, p.rows_view, values, indices, {p.rows, p.cols});
  if (autograd::needs_grad({x})) {
    // saves: indices (i64)
    record(in, values,
           [si = save(indices), kd = p.keepdim_shape, shape = x.sizes(), dtype = x.dtype(),
            d](const Tensor& g) -> std::vector<Tensor> {
             // The gradient flows to the selected element of each row only.
             Tensor gx = zeros(shape, dtype, g.device());
             kernels::scatter_add(gx, d, si.get().reshape(kd), g.reshape(kd));
             return {gx};
           });
  }
  return {values, indices};
}

}  // namespace

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme(ReduceOp::Max, amp::Op::Max, x, dim, keepdim);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme(ReduceOp::Min, amp::Op::Min, x, dim, keepdim);
}

namespace {

// The max/min of the whole tensor. Unlike max(x, dim), whose gradient goes to
// the one index it returns, the gradient is spread evenly over every element
// equal to the result (every NaN, when the result is NaN), as PyTorch's
// evenly_distribute_backward does. The count stays on the device.
Tensor extreme_of_all(ReduceOp op, amp::Op policy, const Tensor& x_in) {
  const autograd::CastInputs in = autograd::autocast_inputs(policy, {x_in});
  const Tensor& x = in[0];
  MT_CHECK(x.numel() > 0, "{}: cannot take the {} of an empty tensor", in.name(), in.name());
  const Tensor value = extreme(op, policy, x.detach().reshape({x.numel()}), 0, false).values;
  if (!autograd::needs_grad({x})) return value;
  // saves: input, output (every element equal to the result shares the gradient)
  return record(in, value, [sx = save(x), sv = save(value)](const Tensor& g) -> std::vector<Tensor> {
    const Tensor x_ = sx.get(), v = sv.get();
    const DType dtype = g.dtype();
    // eq() is false for NaN, so the two masks never overlap.
    const Tensor mask = add(eq(x_, v).to(dtype), logical_and(ne(x_, x_), ne(v, v)).to(dtype));
    return {mul(mask, div(g, sum(mask)))};
  });
}

}  // namespace

Tensor max(const Tensor& x) { return extreme_of_all(ReduceOp::Max, amp::Op::Max, x); }
Tensor min(const Tensor& x) { return extreme_of_all(ReduceOp::Min, amp::Op::Min, x); }

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = wrap_dim(dim, x.dim(), "argmax");
  const ReductionPlan p = plan_reduction(x, {d}, keepdim, "argmax");
  Tensor indices = empty(p.out_shape, kI64, x.device());
  kernels::reduce_rows_with_index(ReduceOp::Max, p.rows_view, Tensor(), indices, {p.rows, p.cols});
  return indices;
}

Tensor argmax(const Tensor& x) { return argmax(x.detach().reshape({x.numel()}), 0); }

Tensor cumsum(const Tensor& x_in, int64_t dim) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::Cumsum, {x_in});
  const Tensor& x = in[0];
  const autograd::RowsAlongDim along = autograd::rows_along_dim(x, dim, "cumsum");
  Tensor sums = empty(along.rows.sizes(), sum_result_type(x.dtype()), x.device());
  kernels::cumsum_rows(along.rows, sums, /*reverse=*/false);
  Tensor out = along.restore(sums);
  if (!autograd::needs_grad({x})) return out;
  // saves: nothing (dim only). dL/dx_i = the sum of g_j over j >= i: a cumsum from the end.
  return record(in, out, [dim](const Tensor& g) -> std::vector<Tensor> {
    const autograd::RowsAlongDim g_along = autograd::rows_along_dim(g, dim, "cumsum backward");
    Tensor gx = empty(g_along.rows.sizes(), g.dtype(), g.device());
    kernels::cumsum_rows(g_along.rows, gx, /*reverse=*/true);
    return {g_along.restore(gx)};
  });
}

Tensor sum_to_size(const Tensor& x, const Shape& shape) {
  if (x.sizes() == shape) return x;
  const Shape& from = x.sizes();
  MT_CHECK(from.size() >= shape.size(), "sum_to_size: cannot sum shape {} to the larger rank {}", shape_str(from),
           shape_str(shape));
  const size_t lead = from.size() - shape.size();
  Shape dims;
  for (size_t i = 0; i < from.size(); ++i) {
    if (i < lead) {
      dims.push_back(static_cast<int64_t>(i));
    } else if (shape[i - lead] == 1 && from[i] != 1) {
      dims.push_back(static_cast<int64_t>(i));
    } else {
      MT_CHECK(shape[i - lead] == from[i], "sum_to_size: shape {} is not broadcastable to {}", shape_str(shape),
               shape_str(from));
    }
  }
  if (dims.empty()) return x.reshape(shape);
  return sum(x, dims, true).reshape(shape);
}

}  // namespace mt
