// Shared by the trainer's test files (test_train.cpp, test_train_errors.cpp):
// a short Fashion-MNIST run's config, temporary files named after these tests,
// and the file reading and gzip writing the checks need.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tools/train/trainer.h"

namespace mt::test {

inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("mixtape_train_test_" + name)).string();
}

// One epoch of the mlp on 2048 training and 500 test images, quietly.
inline tools::TrainConfig quick_config() {
  tools::TrainConfig c;
  c.model = "mlp";
  c.report.progress = false;
  c.data.train_limit = 2048;
  c.data.test_limit = 500;
  c.epochs = 1;
  return c;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// `bytes` then `zeros` zero bytes, gzipped into `path` (fastest level: the
// gzip-bomb case writes over a GiB of zeros).
inline void write_gz(const std::string& path, const std::vector<uint8_t>& bytes, size_t zeros = 0) {
  gzFile f = gzopen(path.c_str(), "wb1");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  const std::vector<uint8_t> block(1 << 20, 0);
  for (size_t i = 0; i < zeros; i += block.size()) gzwrite(f, block.data(), static_cast<unsigned>(block.size()));
  gzclose(f);
}

}  // namespace mt::test
