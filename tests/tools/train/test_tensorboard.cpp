// The TFRecord checksums behind --tensorboard (the event files themselves are
// read back by an independent reader: tests/tools/cli/tensorboard_events.py).
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "runtime/error.h"
#include "tools/train/tensorboard.h"

using namespace mt;

TEST_CASE("CRC-32C matches the Castagnoli check value, and the mask rotates and offsets it", "[tensorboard]") {
  CHECK(tools::crc32c("123456789") == 0xE3069283u);  // the standard check value of CRC-32C
  CHECK(tools::crc32c("") == 0u);
  const uint32_t c = tools::crc32c("abc");
  CHECK(tools::masked_crc32c("abc") == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST_CASE("a file given as the --tensorboard folder is a clear error", "[tensorboard][errors]") {
  const std::string file = "/tmp/mixtape_tensorboard_not_a_folder";
  std::ofstream(file) << "x";
  CHECK_THROWS_WITH(tools::TensorBoardWriter(file), Catch::Contains("cannot create the folder"));
  std::remove(file.c_str());
}
