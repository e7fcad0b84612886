// TensorBoard event files, written natively (`mixtape train --tensorboard DIR`).
//
// An event file is a sequence of TFRecords:
//   uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of the data
// (little-endian; masked = rotate right by 15, plus 0xa282ead8), where data is
// a serialized tensorflow.Event protobuf. The first record carries
// file_version "brain.Event:2"; each scalar is an Event with wall_time (1,
// double), step (2, int64) and summary (5) holding one Summary.Value with tag
// (1, string) and simple_value (2, float). The few protobuf fields needed are
// encoded by hand below, so no protobuf library is involved.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace mt::tools {

// CRC-32C (Castagnoli), as TFRecord uses it.
uint32_t crc32c(std::string_view bytes);
uint32_t masked_crc32c(std::string_view bytes);

class TensorBoardWriter {
 public:
  // Creates DIR (if needed) and DIR/events.out.tfevents.<seconds>.mixtape; mt::Error if it cannot.
  explicit TensorBoardWriter(const std::string& directory);
  void scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::ofstream out_;
};

}  // namespace mt::tools
