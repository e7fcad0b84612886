// libFuzzer target: the IDX reader behind Fashion-MNIST (tools/data/dataset.cpp),
// plain or gzip-compressed.
//
// The input is split in two: its first two bytes (little-endian) give the
// length of the image file, the rest is the label file.
//
// Catches: header fields whose product overflows, a count that does not
// match the bytes, a label outside 0..9, a truncated or corrupt gzip stream,
// and a decompression that allocates without bound.
#include <algorithm>
#include <cstdint>

#include "tests/fuzz/fuzz_input.h"
#include "tools/data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t image_bytes = std::min<size_t>(data[0] | (size_t{data[1]} << 8), size - 2);
  const std::string images = mt::fuzz::write_input("images-idx3-ubyte.gz", data + 2, image_bytes);
  const std::string labels =
      mt::fuzz::write_input("labels-idx1-ubyte.gz", data + 2 + image_bytes, size - 2 - image_bytes);
  return mt::fuzz::refuses_cleanly([&] {
    const mt::data::TensorDataset d = mt::data::load_idx(images, labels);
    // Every pixel and label read back: the tensors hold what the header promised.
    double sum = 0;
    const float* px = d.inputs.data<float>();
    for (int64_t i = 0; i < d.inputs.numel(); ++i) sum += px[i];
    const int64_t* py = d.targets.data<int64_t>();
    for (int64_t i = 0; i < d.targets.numel(); ++i) sum += static_cast<double>(py[i]);
    if (d.inputs.size(0) != d.targets.size(0)) __builtin_trap();
    volatile double sink = sum;
    (void)sink;
  });
}
