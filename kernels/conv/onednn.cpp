// CPU convolution through oneDNN's convolution primitives: forward,
// backward-data and backward-weights, f32 and bf16, f32 accumulation.
//
// Under autocast the operands arrive in bf16 and stay bf16: oneDNN's
// AVX512-BF16 kernels multiply them with vdpbf16ps (AMX where present, an
// emulation on older CPUs), where the im2col + Eigen path widened every
// operand to f32. The weight gradient is accumulated and kept in f32 until
// it is rounded once into the gradient's dtype; the bias is added in f32
// before the one rounding of y.
//
// f16 tensors are widened to f32 around the f32 primitives
// (onednn::compute_dtype).
//
// Layouts: the tensors are NCHW (weights OIHW, or GOIHW with groups) as in
// PyTorch. oneDNN is asked for the layouts it prefers (format_tag::any:
// channel-blocked, nChw16c and the like on AVX-512) and the tensors are
// reordered into them and back around each call, as PyTorch's CPU
// convolution does (NCHW <-> nChw16c/nChw8c by kernels/common/
// channel_blocks.h's AVX2 tiles, 3-4x faster than oneDNN's reorder, which
// copies every other pair); when oneDNN prefers the plain layout nothing is
// copied.
//
// Primitive descriptors are made once per geometry, dtype and thread count
// (oneDNN sizes its blocking for the thread count at creation) and kept. A
// case oneDNN can only offer through its reference implementation is
// declined: the im2col + Eigen path is faster than that.
#include "kernels/conv/onednn.h"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <unordered_map>

#include "kernels/common/cpu_backend.h"
#include "kernels/common/dispatch_helpers.h"
#include "kernels/common/onednn.h"
#include "kernels/common/strided.h"

namespace mt::kernels::cpu {
namespace {

using device_buffers::contiguous_as;
using device_buffers::finish_output;
using device_buffers::output_buffer;
using dnnl::memory;
using Dims = memory::dims;
using Tag = memory::format_tag;

// The tensors' own layouts: PyTorch's NCHW and (G)OIHW.
struct PlainDescs {
  memory::desc src, weights, dst;
};

memory::desc weights_desc(const ConvShape& g, memory::data_type type) {
  if (g.groups == 1) return memory::desc({g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, type, Tag::oihw);
  return memory::desc({g.groups, g.group_out(), g.group_in(), g.kernel_h, g.kernel_w}, type, Tag::goihw);
}

PlainDescs plain_descs(const ConvShape& g, memory::data_type type) {
  return {memory::desc({g.batch, g.in_channels, g.in_h, g.in_w}, type, Tag::nchw), weights_desc(g, type),
          memory::desc({g.batch, g.out_channels, g.out_h, g.out_w}, type, Tag::nchw)};
}

// The same tensor in whatever layout the primitive prefers.
memory::desc any_layout(const memory::desc& md) { return memory::desc(md.dims(), md.data_type(), Tag::any); }

// oneDNN's geometry: dilation counts the gaps (PyTorch's dilation - 1), and
// the right padding equal to the left gives PyTorch's floor-rounded output
// size (oneDNN checks (in + pad_l + pad_r - extent) / stride + 1 == out).
struct Window {
  Dims strides, dilates, pad_l, pad_r;
};

Window window_of(const ConvShape& g) {
  return {{g.stride_h, g.stride_w}, {g.dilation_h - 1, g.dilation_w - 1}, {g.pad_h, g.pad_w}, {g.pad_h, g.pad_w}};
}

// Geometry, dtype and thread count: everything a convolution's primitives depend on.
onednn::PrimitiveKey key_of(const ConvShape& g, memory::data_type type, int64_t pass, bool bias) {
  return {omp_get_max_threads(),
          static_cast<int64_t>(type),
          pass,
          bias,
          g.batch,
          g.in_channels,
          g.in_h,
          g.in_w,
          g.out_channels,
          g.kernel_h,
          g.kernel_w,
          g.stride_h,
          g.stride_w,
          g.pad_h,
          g.pad_w,
          g.dilation_h,
          g.dilation_w,
          g.groups,
          g.out_h,
          g.out_w};
}

using ForwardPd = dnnl::convolution_forward::primitive_desc;
using BackwardDataPd = dnnl::convolution_backward_data::primitive_desc;
using BackwardWeightsPd = dnnl::convolution_backward_weights::primitive_desc;

ForwardPd forward_pd(const ConvShape& g, memory::data_type type, bool bias, bool allow_empty) {
  const PlainDescs plain = plain_descs(g, type);
  const Window w = window_of(g);
  const memory::desc src = any_layout(plain.src), weights = any_layout(plain.weights), dst = any_layout(plain.dst);
  const auto kind = dnnl::prop_kind::forward_training;
  const auto algorithm = dnnl::algorithm::convolution_direct;
  const memory::desc bias_md({g.out_channels}, memory::data_type::f32, Tag::a);
  const dnnl::convolution_forward::desc desc =
      bias
          ? dnnl::convolution_forward::desc(kind, algorithm, src, weights, bias_md, dst, w.strides, w.dilates, w.pad_l,
                                            w.pad_r)
          : dnnl::convolution_forward::desc(kind, algorithm, src, weights, dst, w.strides, w.dilates, w.pad_l, w.pad_r);
  return ForwardPd(desc, onednn::engine(), allow_empty);
}

template <typename Pd>
std::optional<Pd> unless_reference(Pd pd) {
  if (!pd || onednn::is_reference(pd)) return std::nullopt;
  return pd;
}

std::optional<ForwardPd> make_forward(const ConvShape& g, memory::data_type type, bool bias) {
  return unless_reference(forward_pd(g, type, bias, /*allow_empty=*/true));
}

std::optional<BackwardDataPd> make_backward_data(const ConvShape& g, memory::data_type type) {
  const ForwardPd hint = forward_pd(g, type, false, true);
  if (!hint) return std::nullopt;
  const PlainDescs plain = plain_descs(g, type);
  const Window w = window_of(g);
  const dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, any_layout(plain.src),
                                                   any_layout(plain.weights), any_layout(plain.dst), w.strides,
                                                   w.dilates, w.pad_l, w.pad_r);
  return unless_reference(BackwardDataPd(desc, onednn::engine(), hint, /*allow_empty=*/true));
}

// The weight gradient is produced in f32 whatever the operands' dtype.
std::optional<BackwardWeightsPd> make_backward_weights(const ConvShape& g, memory::data_type type) {
  const ForwardPd hint = forward_pd(g, type, false, true);
  if (!hint) return std::nullopt;
  const PlainDescs plain = plain_descs(g, type);
  const Window w = window_of(g);
  const memory::desc diff_weights = any_layout(weights_desc(g, memory::data_type::f32));
  const dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, any_layout(plain.src),
                                                      diff_weights, any_layout(plain.dst), w.strides, w.dilates,
                                                      w.pad_l, w.pad_r);
  return unless_reference(BackwardWeightsPd(desc, onednn::engine(), hint, /*allow_empty=*/true));
}

template <typename Pd>
onednn::PrimitiveCache<Pd>& cache() {
  static onednn::PrimitiveCache<Pd> pds;
  return pds;
}

enum Pass : int64_t { kForward, kBackwardData, kBackwardWeights };

bool declined(const ConvShape& g, const char* pass, const char* why) {
  MT_CHECK(cpu_gemm_library() != CpuGemmLibrary::OneDnn,
           "MT_CPU_GEMM=onednn: oneDNN does not take the conv2d {} of x [{}, {}, {}, {}] with a {}x{} kernel ({})",
           pass, g.batch, g.in_channels, g.in_h, g.in_w, g.kernel_h, g.kernel_w, why);
  return false;
}

void run(const dnnl::primitive& primitive, const std::unordered_map<int, memory>& args) {
  primitive.execute(onednn::stream(), args);
  onednn::stream().wait();
}

// The weight gradient sums over the batch. oneDNN splits that sum over its
// threads, so its result would change in the last bits with the thread count
// (measured: bf16 weight gradients differ between 1 and 2 threads), and
// ThreadTuner changes the count during training. So the batch is cut into a
// fixed number of chunks whatever the thread count, as on the Eigen path:
// each chunk's gradient is computed by oneDNN on one thread, into its own f32
// partial, and the partials are added in chunk order and rounded once.
// The chunks read x and dy as views of the whole batch reordered once (dy
// the input gradient's reorder, shared): a reorder per chunk and operand
// cost resnet's bf16 step about 6% of its samples/s (5 alternating runs of
// 30 steps each, medians 567 -> 604).
constexpr int64_t kWeightGradChunks = 8;

int64_t weight_grad_chunks(const ConvShape& g) { return std::min(g.batch, kWeightGradChunks); }

int64_t chunk_begin(const ConvShape& g, int64_t chunk) { return chunk * g.batch / weight_grad_chunks(g); }

// The geometry of chunk `chunk`'s samples.
ConvShape chunk_geometry(const ConvShape& g, int64_t chunk) {
  ConvShape piece = g;
  piece.batch = chunk_begin(g, chunk + 1) - chunk_begin(g, chunk);
  return piece;
}

// Runs what follows on the calling thread only: oneDNN sizes a primitive for
// omp_get_max_threads() at creation and splits its work that many ways.
class OneThread {
 public:
  OneThread() : before_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(before_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int before_;
};

std::optional<BackwardWeightsPd> weights_pd_for(const ConvShape& chunk, memory::data_type type) {
  return cache<BackwardWeightsPd>().get(key_of(chunk, type, kBackwardWeights, false),
                                        [&] { return make_backward_weights(chunk, type); });
}

// `md` with its batch (dimension 0) `batch` long, when the batch is the
// layout's outermost dimension and not blocked (nchw, nChw16c and the like):
// then each sample is one contiguous run of md's strides[0] elements, and a
// chunk of samples is a run of the whole batch's buffer. None otherwise.
std::optional<memory::desc> with_batch(const memory::desc& md, int64_t batch) {
  dnnl_memory_desc_t d = md.data;
  if (d.format_kind != dnnl_blocked || d.offset0 != 0 || d.extra.flags != 0) return std::nullopt;
  const dnnl_blocking_desc_t& blocking = d.format_desc.blocking;
  for (int i = 0; i < blocking.inner_nblks; ++i) {
    if (blocking.inner_idxs[i] == 0) return std::nullopt;
  }
  if (md.get_size() != static_cast<size_t>(d.padded_dims[0] * blocking.strides[0]) * dnnl_data_type_size(d.data_type)) {
    return std::nullopt;  // the batch is not outermost
  }
  d.dims[0] = d.padded_dims[0] = batch;
  return memory::desc(d);
}

// An operand of the weight gradient (x or dy) for the chunks: the whole
// batch reordered once into the chunks' layout (or dy already reordered for
// the input gradient), each chunk a view of its samples; where a layout
// keeps the batch blocked, each chunk reorders its own samples instead.
class ChunkedOperand {
 public:
  // `plain`: the whole batch's NCHW descriptor over `data`; `chunk_layout`:
  // the first chunk's descriptor in its primitive; `reordered`: the whole
  // batch already in some layout, or null.
  ChunkedOperand(const memory::desc& plain, const void* data, const memory::desc& chunk_layout,
                 const onednn::LayoutBuffer* reordered)
      : plain_(plain), data_(static_cast<const std::byte*>(data)) {
    const std::optional<memory::desc> whole = with_batch(chunk_layout, plain.dims()[0]);
    if (!whole) return;
    if (reordered != nullptr && reordered->memory().get_desc() == *whole) {
      whole_data_ = static_cast<const std::byte*>(reordered->memory().get_data_handle());
    } else {
      own_ = onednn::LayoutBuffer::input(plain, data, *whole);
      whole_data_ = static_cast<const std::byte*>(own_->memory().get_data_handle());
    }
    whole_ = *whole;
  }

  // Samples [n0, n0 + wanted.dims()[0]) in layout `wanted`: a view where the
  // whole batch is in that layout, else a reorder of the plain samples.
  onednn::LayoutBuffer chunk(int64_t n0, const memory::desc& wanted) const {
    const int64_t count = wanted.dims()[0];
    if (whole_ && with_batch(*whole_, count) == wanted) {
      return onednn::LayoutBuffer::view(wanted, whole_data_ + n0 * sample_bytes(*whole_));
    }
    const std::optional<memory::desc> plain_chunk = with_batch(plain_, count);
    MT_CHECK(plain_chunk.has_value(), "conv2d weight gradient: the plain layout has the batch outermost");
    return onednn::LayoutBuffer::input(*plain_chunk, data_ + n0 * sample_bytes(plain_), wanted);
  }

 private:
  static size_t sample_bytes(const memory::desc& md) {
    return static_cast<size_t>(md.data.format_desc.blocking.strides[0]) * dnnl_data_type_size(md.data.data_type);
  }

  memory::desc plain_;
  const std::byte* data_;
  std::optional<memory::desc> whole_;
  const std::byte* whole_data_ = nullptr;
  std::optional<onednn::LayoutBuffer> own_;
};

// The chunks' f32 partial gradients, in the primitives' own weight layout
// when every chunk's primitive chose the same one (summed there and
// reordered into OIHW once), else each reordered into OIHW.
memory::desc partials_layout(const std::vector<BackwardWeightsPd>& pds, const memory::desc& plain) {
  for (const BackwardWeightsPd& pd : pds) {
    if (pd.diff_weights_desc() != pds.front().diff_weights_desc()) return plain;
  }
  return pds.front().diff_weights_desc();
}

// Each chunk's weight-gradient primitive, made for (and run on) one thread;
// none when oneDNN declines any of them.
std::optional<std::vector<BackwardWeightsPd>> chunk_weight_pds(const ConvShape& g, memory::data_type type) {
  const OneThread one_thread;
  std::vector<BackwardWeightsPd> pds;
  for (int64_t chunk = 0; chunk < weight_grad_chunks(g); ++chunk) {
    const std::optional<BackwardWeightsPd> pd = weights_pd_for(chunk_geometry(g, chunk), type);
    if (!pd) return std::nullopt;
    pds.push_back(*pd);
  }
  return pds;
}

void weight_gradient_in_chunks(const Tensor& dy, const Tensor& x, const ConvShape& g, memory::data_type type,
                               const std::vector<BackwardWeightsPd>& pds, const onednn::LayoutBuffer* dy_reordered,
                               const Tensor& dweight) {
  const int64_t chunks = weight_grad_chunks(g);
  const PlainDescs plain = plain_descs(g, type);
  const ChunkedOperand chunked_dy(plain.dst, dy.data_ptr(), pds.front().diff_dst_desc(), dy_reordered);
  const ChunkedOperand chunked_x(plain.src, x.data_ptr(), pds.front().src_desc(), nullptr);
  const memory::desc plain_f32 = weights_desc(g, memory::data_type::f32);
  const memory::desc partial_md = partials_layout(pds, plain_f32);
  const int64_t partial_size = static_cast<int64_t>(partial_md.get_size() / sizeof(float));
  HostScratch<float> partials(chunks * partial_size);
  const int64_t work_per_chunk = 2 * (g.batch / chunks) * g.out_channels * g.out_plane() * g.patch();
  parallel_for(chunks, work_per_chunk, [&](int64_t first, int64_t end) {
    const OneThread one_thread;
    for (int64_t chunk = first; chunk < end; ++chunk) {
      const BackwardWeightsPd& pd = pds[static_cast<size_t>(chunk)];
      const int64_t n0 = chunk_begin(g, chunk);
      const onednn::LayoutBuffer diff_dst = chunked_dy.chunk(n0, pd.diff_dst_desc());
      const onednn::LayoutBuffer src = chunked_x.chunk(n0, pd.src_desc());
      onednn::LayoutBuffer diff_weights =
          onednn::LayoutBuffer::output(partial_md, partials.get() + chunk * partial_size, pd.diff_weights_desc());
      run(dnnl::convolution_backward_weights(pd), {{DNNL_ARG_DIFF_DST, diff_dst.memory()},
                                                   {DNNL_ARG_SRC, src.memory()},
                                                   {DNNL_ARG_DIFF_WEIGHTS, diff_weights.memory()}});
      diff_weights.commit();
    }
  });
  float* sum = partials.get();
  for (int64_t chunk = 1; chunk < chunks; ++chunk) {
    const float* part = partials.get() + chunk * partial_size;
    for (int64_t i = 0; i < partial_size; ++i) sum[i] += part[i];
  }
  onednn::LayoutBuffer total = onednn::LayoutBuffer::input(partial_md, sum, plain_f32);
  store(static_cast<const float*>(total.memory().get_data_handle()), dweight);  // the one rounding into dweight's dtype
}

}  // namespace

bool onednn_conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShape& geometry,
                           const Tensor& y) {
  if (cpu_gemm_library() == CpuGemmLibrary::Eigen) return false;
  const DType dtype = onednn::compute_dtype(y.dtype());
  const std::optional<memory::data_type> type = onednn::data_type(dtype);
  if (!type) return declined(geometry, "forward", "dtype");
  const bool has_bias = bias.defined();
  const std::optional<ForwardPd> pd = cache<ForwardPd>().get(key_of(geometry, *type, kForward, has_bias),
                                                             [&] { return make_forward(geometry, *type, has_bias); });
  if (!pd) return declined(geometry, "forward", "no optimised oneDNN kernel for this CPU");

  const Tensor vx = contiguous_as(x, dtype), vw = contiguous_as(weight, dtype), vy = output_buffer(y, dtype);
  const PlainDescs plain = plain_descs(geometry, *type);
  const onednn::LayoutBuffer src = onednn::LayoutBuffer::input(plain.src, vx.data_ptr(), pd->src_desc());
  const onednn::LayoutBuffer weights = onednn::LayoutBuffer::input(plain.weights, vw.data_ptr(), pd->weights_desc());
  onednn::LayoutBuffer dst = onednn::LayoutBuffer::output(plain.dst, vy.data_ptr(), pd->dst_desc());
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, src.memory()}, {DNNL_ARG_WEIGHTS, weights.memory()}, {DNNL_ARG_DST, dst.memory()}};
  std::optional<Loaded<float>> bias_f32;
  if (has_bias) {
    bias_f32.emplace(bias);
    const memory::desc bias_md({geometry.out_channels}, memory::data_type::f32, Tag::a);
    args.emplace(DNNL_ARG_BIAS, memory(bias_md, onednn::engine(), const_cast<float*>(bias_f32->data())));
  }
  run(dnnl::convolution_forward(*pd), args);
  dst.commit();
  finish_output(vy, y);
  return true;
}

bool onednn_conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const ConvShape& geometry,
                            const Tensor& dx, const Tensor& dweight) {
  if (cpu_gemm_library() == CpuGemmLibrary::Eigen) return false;
  const DType dtype = onednn::compute_dtype(dx.defined() ? dx.dtype() : dweight.dtype());
  const std::optional<memory::data_type> type = onednn::data_type(dtype);
  if (!type) return declined(geometry, "backward", "dtype");
  std::optional<BackwardDataPd> data_pd;
  if (dx.defined()) {
    data_pd = cache<BackwardDataPd>().get(key_of(geometry, *type, kBackwardData, false),
                                          [&] { return make_backward_data(geometry, *type); });
    if (!data_pd) return declined(geometry, "input gradient", "no optimised oneDNN kernel for this CPU");
  }
  std::optional<std::vector<BackwardWeightsPd>> weight_pds;
  if (dweight.defined()) {
    weight_pds = chunk_weight_pds(geometry, *type);
    if (!weight_pds) return declined(geometry, "weight gradient", "no optimised oneDNN kernel for this CPU");
  }

  const PlainDescs plain = plain_descs(geometry, *type);
  const Tensor vdy = contiguous_as(dy, dtype);
  std::optional<onednn::LayoutBuffer> diff_dst;  // dy in the input gradient's layout, read again by the weight gradient
  if (data_pd) {
    const Tensor vw = contiguous_as(weight, dtype), vdx = output_buffer(dx, dtype);
    diff_dst = onednn::LayoutBuffer::input(plain.dst, vdy.data_ptr(), data_pd->diff_dst_desc());
    const onednn::LayoutBuffer weights =
        onednn::LayoutBuffer::input(plain.weights, vw.data_ptr(), data_pd->weights_desc());
    onednn::LayoutBuffer diff_src = onednn::LayoutBuffer::output(plain.src, vdx.data_ptr(), data_pd->diff_src_desc());
    run(dnnl::convolution_backward_data(*data_pd), {{DNNL_ARG_DIFF_DST, diff_dst->memory()},
                                                    {DNNL_ARG_WEIGHTS, weights.memory()},
                                                    {DNNL_ARG_DIFF_SRC, diff_src.memory()}});
    diff_src.commit();
    finish_output(vdx, dx);
  }
  if (weight_pds) {
    weight_gradient_in_chunks(vdy, contiguous_as(x, dtype), geometry, *type, *weight_pds,
                              diff_dst ? &*diff_dst : nullptr, dweight);
  }
  return true;
}

// ---- INT8 --------------------------------------------------------------

namespace {

// The INT8 convolution for one geometry: u8 src (its zero point given at run
// time) x s8 weights -> the s32 sums; layouts oneDNN's choice, as for f32.
// (oneDNN 2.6 declines run-time output scales for convolutions on this
// CPU, measured: the scales are applied by the caller's epilogue.)
std::optional<ForwardPd> make_int8_forward(const ConvShape& g) {
  const Window w = window_of(g);
  const memory::desc src({g.batch, g.in_channels, g.in_h, g.in_w}, memory::data_type::u8, Tag::any);
  const memory::desc weights({g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, memory::data_type::s8, Tag::any);
  const memory::desc dst({g.batch, g.out_channels, g.out_h, g.out_w}, memory::data_type::s32, Tag::any);
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                             src, weights, dst, w.strides, w.dilates, w.pad_l, w.pad_r);
  dnnl::primitive_attr attr;
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  return unless_reference(ForwardPd(desc, attr, onednn::engine(), /*allow_empty=*/true));
}

constexpr int64_t kInt8Forward = 3;

}  // namespace

Int8SumsLayout onednn_int8_conv2d(const Int8Conv2d& conv, const std::function<int32_t*()>& nchw_sums,
                                  HostScratch<int32_t>& channels_last) {
  const ConvShape& g = conv.shape;
  if (cpu_gemm_library() == CpuGemmLibrary::Eigen || !onednn_int8_native() || g.groups != 1) {
    return Int8SumsLayout::None;
  }
  const std::optional<ForwardPd> pd = cache<ForwardPd>().get(key_of(g, memory::data_type::u8, kInt8Forward, false),
                                                             [&] { return make_int8_forward(g); });
  if (!pd) {
    declined(g, "INT8 forward", "no optimised oneDNN INT8 kernel for this CPU");
    return Int8SumsLayout::None;
  }
  const memory::desc plain_src({g.batch, g.in_channels, g.in_h, g.in_w}, memory::data_type::u8, Tag::nchw);
  const memory::desc plain_weights({g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, memory::data_type::s8,
                                   Tag::oihw);
  const memory::dims dst_dims{g.batch, g.out_channels, g.out_h, g.out_w};
  const memory::desc nhwc_dst(dst_dims, memory::data_type::s32, Tag::nhwc);
  const bool writes_channels_last = pd->dst_desc() == nhwc_dst;
  int32_t* sums = nullptr;
  if (writes_channels_last) {
    channels_last = HostScratch<int32_t>(g.batch * g.out_plane() * g.out_channels);
    sums = channels_last.get();
  } else {
    sums = nchw_sums();
  }
  const memory::desc plain_dst(dst_dims, memory::data_type::s32, writes_channels_last ? Tag::nhwc : Tag::nchw);
  const onednn::LayoutBuffer src = onednn::LayoutBuffer::input(plain_src, conv.x, pd->src_desc());
  const onednn::LayoutBuffer weights = onednn::LayoutBuffer::input(plain_weights, conv.weight, pd->weights_desc());
  onednn::LayoutBuffer dst = onednn::LayoutBuffer::output(plain_dst, sums, pd->dst_desc());
  int32_t zero_point = conv.x_zero_point;
  const dnnl::engine& engine = onednn::engine();
  run(dnnl::convolution_forward(*pd), {{DNNL_ARG_SRC, src.memory()},
                                       {DNNL_ARG_WEIGHTS, weights.memory()},
                                       {DNNL_ARG_DST, dst.memory()},
                                       {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC,
                                        memory({{1}, memory::data_type::s32, Dims{1}}, engine, &zero_point)}});
  dst.commit();
  return writes_channels_last ? Int8SumsLayout::ChannelsLast : Int8SumsLayout::Nchw;
}

}  // namespace mt::kernels::cpu
