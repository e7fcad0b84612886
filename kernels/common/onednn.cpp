#include "kernels/common/onednn.h"

#include <string>
#include <utility>

#include "kernels/common/channel_blocks.h"

namespace mt::kernels::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine cpu(dnnl::engine::kind::cpu, 0);
  return cpu;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

std::optional<dnnl::memory::data_type> data_type(DType dtype) {
  if (dtype == kF32) return dnnl::memory::data_type::f32;
  if (dtype == kBF16) return dnnl::memory::data_type::bf16;
  return std::nullopt;
}

DType compute_dtype(DType dtype) { return dtype == kF16 ? kF32 : dtype; }

void append(PrimitiveKey& key, const dnnl::memory::desc& md) {
  key.push_back(static_cast<int64_t>(md.data_type()));
  for (const int64_t d : md.dims()) key.push_back(d);
  for (int i = 0; i < md.data.ndims; ++i) key.push_back(md.data.format_desc.blocking.strides[i]);
}

bool is_reference(const dnnl::primitive_desc_base& pd) { return std::string(pd.impl_info_str()).rfind("ref", 0) == 0; }

LayoutBuffer::LayoutBuffer(const dnnl::memory::desc& plain, void* data, const dnnl::memory::desc& wanted)
    : plain_(plain, engine(), data) {
  if (wanted == plain) {
    memory_ = plain_;
    return;
  }
  scratch_ = HostScratch<std::byte>(static_cast<int64_t>(wanted.get_size()));
  memory_ = dnnl::memory(wanted, engine(), scratch_.get());
}

namespace {

// `plain` and `blocked` as the shape of a copy by kernels/common/channel_blocks.h:
// NCHW and nChw16c (or nChw8c) of one 2- or 4-byte type, whole blocks.
// None for any other pair, which oneDNN's reorder copies.
std::optional<cpu::ChannelBlocks> channel_blocks_between(const dnnl::memory::desc& plain,
                                                         const dnnl::memory::desc& blocked) {
  using Tag = dnnl::memory::format_tag;
  const dnnl::memory::dims dims = plain.dims();
  if (dims.size() != 4 || blocked.data_type() != plain.data_type() ||
      plain != dnnl::memory::desc(dims, plain.data_type(), Tag::abcd)) {
    return std::nullopt;
  }
  const auto element_bytes = static_cast<int64_t>(dnnl::memory::data_type_size(plain.data_type()));
  for (const auto& [block, tag] : {std::pair{int64_t{16}, Tag::aBcd16b}, std::pair{int64_t{8}, Tag::aBcd8b}}) {
    const cpu::ChannelBlocks shape{dims[0], dims[1], dims[2] * dims[3], block, element_bytes};
    if (cpu::channel_blocks_supported(shape) && blocked == dnnl::memory::desc(dims, plain.data_type(), tag)) {
      return shape;
    }
  }
  return std::nullopt;
}

void reorder(dnnl::memory& from, dnnl::memory& to) {
  dnnl::reorder(from, to).execute(stream(), from, to);
  stream().wait();
}

}  // namespace

LayoutBuffer LayoutBuffer::input(const dnnl::memory::desc& plain, const void* data, const dnnl::memory::desc& wanted) {
  LayoutBuffer buffer(plain, const_cast<void*>(data), wanted);
  if (buffer.scratch_.empty()) return buffer;
  if (const std::optional<cpu::ChannelBlocks> shape = channel_blocks_between(plain, wanted)) {
    cpu::plain_to_channel_blocks(*shape, data, buffer.memory_.get_data_handle());
  } else {
    reorder(buffer.plain_, buffer.memory_);
  }
  return buffer;
}

LayoutBuffer LayoutBuffer::output(const dnnl::memory::desc& plain, void* data, const dnnl::memory::desc& wanted) {
  return LayoutBuffer(plain, data, wanted);
}

LayoutBuffer LayoutBuffer::view(const dnnl::memory::desc& md, const void* data) {
  return LayoutBuffer(md, const_cast<void*>(data), md);
}

void LayoutBuffer::commit() {
  if (scratch_.empty()) return;
  if (const std::optional<cpu::ChannelBlocks> shape = channel_blocks_between(plain_.get_desc(), memory_.get_desc())) {
    cpu::channel_blocks_to_plain(*shape, memory_.get_data_handle(), plain_.get_data_handle());
  } else {
    reorder(memory_, plain_);
  }
}

}  // namespace mt::kernels::onednn
