// Views and shape ops (the differentiable Tensor methods), cat/stack/split,
// index_select and gather. A view shares storage; its backward maps the
// gradient back onto the input's shape.
#include <algorithm>
#include <numeric>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/op_helpers.h"
#include "autograd/tensor_methods.h"
#include "core/caching_allocator.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/indexing/indexing.h"

namespace mt {

using autograd::record;
using autograd::save;

namespace {

// Records a view op whose backward is `rule(g)`. saves: nothing (each view's
// rule holds shapes, dims or a dtype only; views have no op_list.h row).
template <typename Rule>
Tensor record_view(const char* name, const Tensor& input, const Tensor& view, Rule rule) {
  if (!autograd::needs_grad({input})) return view;
  return autograd::record_node(
      name, view, {input}, [rule](const Tensor& g) -> std::vector<Tensor> { return {rule(g)}; },
      /*saves_tensors=*/false);
}

// Resolves a single -1 in a requested shape against numel.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op) {
  Shape shape = requested;
  int64_t known = 1;
  int64_t infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      MT_CHECK(infer_at < 0, "{}: only one dimension can be -1 in {}", op, shape_str(requested));
      infer_at = static_cast<int64_t>(i);
    } else {
      MT_CHECK(shape[i] >= 0, "{}: invalid size {} in {}", op, shape[i], shape_str(requested));
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    MT_CHECK(known != 0 && numel % known == 0, "{}: shape {} is invalid for a tensor of {} elements", op,
             shape_str(requested), numel);
    shape[static_cast<size_t>(infer_at)] = numel / known;
  }
  MT_CHECK(shape_numel(shape) == numel, "{}: shape {} is invalid for a tensor of {} elements", op, shape_str(requested),
           numel);
  return shape;
}

// wrap_dim accepts dim 0 / -1 on a 0-dim tensor (as PyTorch does), but ops
// that index along a dim need one to exist.
void check_has_dims(const char* op, const Tensor& x) {
  MT_CHECK(x.dim() > 0, "{}: expected a tensor with at least 1 dim, got a 0-dim tensor", op);
}

// The geometry of x.slice(dim, start, end, step) on a tensor with `sizes`/`strides`/`offset`.
Tensor slice_view(const Tensor& x, int64_t d, int64_t start, int64_t length, int64_t step) {
  Shape sizes = x.sizes(), strides = x.strides();
  sizes[static_cast<size_t>(d)] = length;
  strides[static_cast<size_t>(d)] *= step;
  return make_view(x, sizes, strides, x.offset() + start * x.strides()[static_cast<size_t>(d)]);
}

}  // namespace

namespace autograd::tensor_methods {

// ---------------------------------------------------------------- Tensor methods: views
// (Tensor's differentiable methods, installed into core by
// autograd/tensor_methods.cpp; `self` is the tensor the method is called on)

Tensor view(const Tensor& self, const Shape& shape) {
  const Shape s = infer_shape(shape, self.numel(), "view");
  const std::optional<Shape> strides = view_strides(self.sizes(), self.strides(), s);
  MT_CHECK(strides.has_value(),
           "view: a tensor with shape {} and strides {} cannot be viewed as {} without a copy (a dim to split or "
           "merge is not contiguous in memory); use reshape() instead",
           self.shape_string(), shape_str(self.strides()), shape_str(s));
  Tensor v = make_view(self, s, *strides, self.offset());
  return record_view("view", self, v, [in = self.sizes()](const Tensor& g) { return g.reshape(in); });
}

// A view wherever the strides allow one (as PyTorch: splitting the last dim
// of a fused qkv slice, or a transposed tensor kept in its own shape), a
// contiguous copy otherwise. Copying every non-contiguous input made three
// copies of each GPT block's q, k and v slices.
Tensor reshape(const Tensor& self, const Shape& shape) {
  if (self.is_contiguous() || self.numel() == 0) return self.view(shape);
  const Shape s = infer_shape(shape, self.numel(), "reshape");
  if (view_strides(self.sizes(), self.strides(), s).has_value()) return self.view(s);
  return self.contiguous().view(s);
}

Tensor flatten(const Tensor& self, int64_t start_dim, int64_t end_dim) {
  if (self.dim() == 0) return self.reshape({1});
  const int64_t s = wrap_dim(start_dim, self.dim(), "flatten"), e = wrap_dim(end_dim, self.dim(), "flatten");
  MT_CHECK(s <= e, "flatten: start_dim {} comes after end_dim {}", start_dim, end_dim);
  Shape shape(self.sizes().begin(), self.sizes().begin() + s);
  shape.push_back(
      std::accumulate(self.sizes().begin() + s, self.sizes().begin() + e + 1, int64_t{1}, std::multiplies<>()));
  shape.insert(shape.end(), self.sizes().begin() + e + 1, self.sizes().end());
  return self.reshape(shape);
}

Tensor permute(const Tensor& self, const Shape& dims) {
  MT_CHECK(static_cast<int64_t>(dims.size()) == self.dim(), "permute: {} dims given for a tensor with {} dims ({})",
           dims.size(), self.dim(), self.shape_string());
  Shape sizes_out(dims.size()), strides_out(dims.size()), inverse(dims.size());
  std::vector<bool> used(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const auto d = static_cast<size_t>(wrap_dim(dims[i], self.dim(), "permute"));
    MT_CHECK(!used[d], "permute: dim {} repeats in {}", d, shape_str(dims));
    used[d] = true;
    sizes_out[i] = self.sizes()[d];
    strides_out[i] = self.strides()[d];
    inverse[d] = static_cast<int64_t>(i);
  }
  Tensor v = make_view(self, sizes_out, strides_out, self.offset());
  return record_view("permute", self, v, [inverse](const Tensor& g) { return g.permute(inverse); });
}

Tensor transpose(const Tensor& self, int64_t dim0, int64_t dim1) {
  const int64_t a = wrap_dim(dim0, self.dim(), "transpose"), b = wrap_dim(dim1, self.dim(), "transpose");
  if (self.dim() == 0) return self;
  Shape order(static_cast<size_t>(self.dim()));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::swap(order[static_cast<size_t>(a)], order[static_cast<size_t>(b)]);
  return self.permute(order);
}

Tensor narrow(const Tensor& self, int64_t dim_, int64_t start, int64_t length) {
  check_has_dims("narrow", self);
  const int64_t d = wrap_dim(dim_, self.dim(), "narrow");
  const int64_t size_d = self.sizes()[static_cast<size_t>(d)];
  if (start < 0) start += size_d;
  MT_CHECK(start >= 0 && length >= 0 && start + length <= size_d,
           "narrow: range [{}, {}) is outside dim {} of size {} (shape {})", start, start + length, d, size_d,
           self.shape_string());
  return self.slice(d, start, start + length, 1);
}

Tensor slice(const Tensor& self, int64_t dim_, int64_t start, int64_t end, int64_t step) {
  check_has_dims("slice", self);
  const int64_t d = wrap_dim(dim_, self.dim(), "slice");
  MT_CHECK(step > 0, "slice: step must be positive, got {}", step);
  const int64_t size_d = self.sizes()[static_cast<size_t>(d)];
  if (start < 0) start += size_d;
  if (end < 0) end += size_d;
  start = std::clamp<int64_t>(start, 0, size_d);
  end = std::clamp<int64_t>(end, start, size_d);
  const int64_t length = (end - start + step - 1) / step;
  Tensor v = slice_view(self, d, start, length, step);
  Tensor out =
      record_view("slice", self, v, [in = self.sizes(), dtype = self.dtype(), d, start, length, step](const Tensor& g) {
        Tensor gx = zeros(in, dtype, g.device());
        kernels::copy(g, slice_view(gx, d, start, length, step));
        return gx;
      });
  if (step == 1 && out.grad_fn() != nullptr && out.grad_fn() != self.grad_fn()) {
    out.grad_fn()->set_gradient_region({d, start, length});  // see autograd::GradientRegion
  }
  return out;
}

Tensor select(const Tensor& self, int64_t dim_, int64_t index) {
  check_has_dims("select", self);
  const int64_t d = wrap_dim(dim_, self.dim(), "select");
  const int64_t size_d = self.sizes()[static_cast<size_t>(d)];
  MT_CHECK(index >= -size_d && index < size_d, "select: index {} is out of range for dim {} of size {}", index, d,
           size_d);
  return self.narrow(d, index < 0 ? index + size_d : index, 1).squeeze(d);
}

Tensor expand(const Tensor& self, const Shape& shape) {
  MT_CHECK(shape.size() >= self.sizes().size(), "expand: cannot expand shape {} to fewer dims {}", self.shape_string(),
           shape_str(shape));
  Shape target = shape;
  const size_t lead = shape.size() - self.sizes().size();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i >= lead && shape[i] == -1) target[i] = self.sizes()[i - lead];
    // -1 means "keep this dim", so it has no meaning for a new leading dim.
    MT_CHECK(target[i] >= 0, "expand: invalid size {} at dim {} of {} for shape {} (-1 only keeps an existing dim)",
             shape[i], i, shape_str(shape), self.shape_string());
    MT_CHECK(i < lead || self.sizes()[i - lead] == target[i] || self.sizes()[i - lead] == 1,
             "expand: cannot expand shape {} to {} (dim {} has size {})", self.shape_string(), shape_str(shape), i,
             self.sizes()[i - lead]);
  }
  if (target == self.sizes()) return self;
  Tensor v = autograd::broadcast_view(self.detach(), target);
  return record_view("expand", self, v, [in = self.sizes()](const Tensor& g) { return sum_to_size(g, in); });
}

Tensor squeeze_dim(const Tensor& self, int64_t dim_) {
  if (self.dim() == 0) return self;
  const auto d = static_cast<size_t>(wrap_dim(dim_, self.dim(), "squeeze"));
  if (self.sizes()[d] != 1) return self;
  Shape s = self.sizes(), st = self.strides();
  s.erase(s.begin() + static_cast<int64_t>(d));
  st.erase(st.begin() + static_cast<int64_t>(d));
  Tensor v = make_view(self, s, st, self.offset());
  return record_view("squeeze", self, v, [in = self.sizes()](const Tensor& g) { return g.reshape(in); });
}

Tensor squeeze_all(const Tensor& self) {
  Shape s, st;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (self.sizes()[static_cast<size_t>(d)] == 1) continue;
    s.push_back(self.sizes()[static_cast<size_t>(d)]);
    st.push_back(self.strides()[static_cast<size_t>(d)]);
  }
  Tensor v = make_view(self, s, st, self.offset());
  return record_view("squeeze", self, v, [in = self.sizes()](const Tensor& g) { return g.reshape(in); });
}

Tensor unsqueeze(const Tensor& self, int64_t dim_) {
  const auto d = static_cast<size_t>(wrap_dim(dim_, self.dim() + 1, "unsqueeze"));
  Shape s = self.sizes(), st = self.strides();
  const int64_t stride = d < st.size() ? st[d] * s[d] : 1;
  s.insert(s.begin() + static_cast<int64_t>(d), 1);
  st.insert(st.begin() + static_cast<int64_t>(d), stride);
  Tensor v = make_view(self, s, st, self.offset());
  return record_view("unsqueeze", self, v, [in = self.sizes()](const Tensor& g) { return g.reshape(in); });
}

// ---------------------------------------------------------------- Tensor methods: copies and casts

Tensor contiguous(const Tensor& self) {
  if (self.is_contiguous()) return self;
  return self.clone();
}

Tensor clone(const Tensor& self) {
  Tensor out = empty(self.sizes(), self.dtype(), self.device());
  kernels::copy(self, out);
  return record_view("clone", self, out, [](const Tensor& g) { return g; });
}

Tensor to_dtype(const Tensor& self, DType target) {
  if (target == self.dtype()) return self;
  Tensor out = empty(self.sizes(), target, self.device());
  kernels::copy(self, out);
  // Integer results take no part in autograd, nor do FP8 ones: an unscaled
  // FP8 cast is storage, not a differentiable op (FP8 training scales its
  // operands inside the FP8 GEMMs, which have their own backward).
  if (!is_compute_float(target)) return out;
  // The cast's backward turns the gradient back into the source dtype
  // (e.g. f16 gradients of an f32 master parameter come back as f32).
  return record_view("to", self, out, [source = self.dtype()](const Tensor& g) { return g.to(source); });
}

Tensor to_device(const Tensor& self, Device target) {
  if (target == self.device()) return self;
  // Copy the bytes of a contiguous version (made on the source device) into
  // a fresh contiguous tensor on the target: memcpy between host-accessible
  // devices (cpu, sim), cudaMemcpy to or from a GPU.
  const Tensor source = self.is_contiguous() ? self.detach() : self.detach().contiguous();
  Tensor out = empty(self.sizes(), self.dtype(), target);
  copy_bytes(out.data_ptr(), target, source.data_ptr(), source.device(), out.nbytes(),
             "Tensor::to between the host and a device");
  out.storage()->bump_version();
  // Differentiable: the gradient moves back to where the input lives.
  return record_view("to_device", self, out,
                     [source_device = self.device()](const Tensor& g) { return g.to(source_device); });
}

void backward(const Tensor& self, const Tensor& gradient, bool retain_graph) {
  autograd::backward(self, gradient, retain_graph);
}

}  // namespace autograd::tensor_methods

// ---------------------------------------------------------------- cat / stack / split

Tensor cat(const std::vector<Tensor>& tensors_in, int64_t dim) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::Cat, tensors_in);
  const std::vector<Tensor>& tensors = in.tensors();
  MT_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors.front();
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  DType dtype = first.dtype();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_has_dims("cat", t);
    autograd::check_same_device("cat", first, t);
    MT_CHECK(t.dim() == first.dim(), "cat: tensor {} has {} dims but tensor 0 has {} ({} vs {})", i, t.dim(),
             first.dim(), t.shape_string(), first.shape_string());
    for (int64_t k = 0; k < t.dim(); ++k) {
      MT_CHECK(k == d || t.size(k) == first.size(k),
               "cat: sizes must match except in dim {}, but tensor {} has shape {} and tensor 0 has {}", d, i,
               t.shape_string(), first.shape_string());
    }
    dtype = promote_types(dtype, t.dtype());
    total += t.size(d);
  }
  Shape shape = first.sizes();
  shape[static_cast<size_t>(d)] = total;
  Tensor out = empty(shape, dtype, first.device());
  std::vector<int64_t> lengths;
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    kernels::copy(t, slice_view(out, d, at, t.size(d), 1));
    lengths.push_back(t.size(d));
    at += t.size(d);
  }
  if (!autograd::needs_grad(tensors)) return out;
  // saves: nothing (split lengths only)
  return record(in, out, [lengths, d](const Tensor& g) { return split(g, lengths, d); });
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  MT_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const int64_t d = wrap_dim(dim, tensors.front().dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (size_t i = 0; i < tensors.size(); ++i) {
    MT_CHECK(tensors[i].sizes() == tensors.front().sizes(), "stack: tensor {} has shape {} but tensor 0 has {}", i,
             tensors[i].shape_string(), tensors.front().shape_string());
    expanded.push_back(tensors[i].unsqueeze(d));
  }
  return cat(expanded, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  check_has_dims("split", x);
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  MT_CHECK(total == x.size(d), "split: sizes {} add up to {} but dim {} has size {}", shape_str(sizes), total, d,
           x.size(d));
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (int64_t len : sizes) {
    parts.push_back(x.narrow(d, at, len));
    at += len;
  }
  return parts;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  MT_CHECK(split_size > 0, "split: split_size must be positive, got {}", split_size);
  check_has_dims("split", x);
  const int64_t size_d = x.size(dim);
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < size_d; at += split_size) sizes.push_back(std::min(split_size, size_d - at));
  return split(x, sizes, dim);
}

// ---------------------------------------------------------------- index_select / gather

Tensor index_select(const Tensor& x_in, int64_t dim, const Tensor& index) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::IndexSelect, {x_in});
  const Tensor& x = in[0];
  autograd::check_index_tensor("index_select", index);
  autograd::check_same_device("index_select", x, index);
  MT_CHECK(index.dim() <= 1, "index_select: index must be 1-D, got {}", index.shape_string());
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  if (x.dim() == 0) {
    // A 0-dim input acts as a 1-element vector and stays 0-dim, as in PyTorch.
    MT_CHECK(index.numel() == 1, "index_select: a 0-dim input takes exactly one index, got {}", index.shape_string());
    return index_select(x.reshape({1}), 0, index).reshape({});
  }
  Shape shape = x.sizes();
  shape[static_cast<size_t>(d)] = index.numel();
  Tensor out = empty(shape, x.dtype(), x.device());
  kernels::index_select(x, d, index, out);
  if (!autograd::needs_grad({x})) return out;
  // saves: index
  return record(in, out,
                [si = save(index), d, in = x.sizes(), dtype = x.dtype()](const Tensor& g) -> std::vector<Tensor> {
                  Tensor gx = zeros(in, dtype, g.device());
                  kernels::index_add(gx, d, si.get(), g);  // deterministic accumulation of repeated indices
                  return {gx};
                });
}

Tensor gather(const Tensor& x_in, int64_t dim, const Tensor& index) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::Gather, {x_in});
  const Tensor& x = in[0];
  autograd::check_index_tensor("gather", index);
  autograd::check_same_device("gather", x, index);
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  MT_CHECK(index.dim() == x.dim(), "gather: index {} must have as many dims as the input {}", index.shape_string(),
           x.shape_string());
  for (int64_t k = 0; k < x.dim(); ++k) {
    MT_CHECK(k == d || index.size(k) <= x.size(k), "gather: index {} is larger than input {} in dim {}",
             index.shape_string(), x.shape_string(), k);
  }
  Tensor out = empty(index.sizes(), x.dtype(), x.device());
  kernels::gather(x, d, index, out);
  if (!autograd::needs_grad({x})) return out;
  // saves: index
  return record(in, out,
                [si = save(index), d, in = x.sizes(), dtype = x.dtype()](const Tensor& g) -> std::vector<Tensor> {
                  Tensor gx = zeros(in, dtype, g.device());
                  kernels::scatter_add(gx, d, si.get(), g);
                  return {gx};
                });
}

Tensor index_add(const Tensor& x_in, int64_t dim, const Tensor& index, const Tensor& src_in) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::IndexAdd, {x_in, src_in});
  const DType dtype = promote_types(in[0].dtype(), in[1].dtype());  // as add's
  const Tensor x = in[0].to(dtype), src = in[1].to(dtype);
  autograd::check_index_tensor("index_add", index);
  autograd::check_same_device("index_add", x, index);
  autograd::check_same_device("index_add", x, src);
  MT_CHECK(index.dim() <= 1, "index_add: index must be 1-D, got {}", index.shape_string());
  MT_CHECK(x.dim() >= 1, "index_add: the input needs a dim to index, got {}", x.shape_string());
  const int64_t d = wrap_dim(dim, x.dim(), "index_add");
  Shape expected = x.sizes();
  expected[static_cast<size_t>(d)] = index.numel();
  MT_CHECK(src.sizes() == expected, "index_add: source {} must be {} (the input {} with {} indices in dim {})",
           src.shape_string(), shape_str(expected), x.shape_string(), index.numel(), d);
  Tensor out = x.contiguous().clone();
  kernels::index_add(out, d, index, src);
  if (!autograd::needs_grad({x, src})) return out;
  // saves: index
  return record(in, out, [si = save(index), d, src_shape = src.sizes()](const Tensor& g) -> std::vector<Tensor> {
    Tensor gs = empty(src_shape, g.dtype(), g.device());
    kernels::index_select(g, d, si.get(), gs);  // each source slice reads back the slot it was added to
    return {g, gs};
  });
}

}  // namespace mt

namespace mt {

namespace {
void check_in_place_allowed(const char* op, const Tensor& dst) {
  MT_CHECK(!(GradMode::is_enabled() && (dst.requires_grad() || dst.grad_fn())),
           "{}: in-place write into a tensor that takes part in autograd (shape {}); wrap it in NoGradGuard, as an "
           "optimizer update does",
           op, dst.shape_string());
}
}  // namespace

void copy_(const Tensor& dst, const Tensor& src) {
  check_in_place_allowed("copy_", dst);
  const Shape shape = broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  MT_CHECK(shape == dst.sizes(), "copy_: source {} does not broadcast to destination {}", src.shape_string(),
           dst.shape_string());
  // As in PyTorch, copy_ also moves data between devices (loading a CPU
  // checkpoint into GPU state): the source travels to the destination first.
  const Tensor local = src.device() == dst.device() ? src : src.to(dst.device());
  kernels::copy(autograd::broadcast_view(local, shape), dst);
}

void fill_(const Tensor& dst, double value) {
  check_in_place_allowed("fill_", dst);
  kernels::fill(dst, value);
}

}  // namespace mt
