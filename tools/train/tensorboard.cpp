#include "tools/train/tensorboard.h"

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "runtime/error.h"

namespace mt::tools {

namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // reflected 0x1edc6f41
    table[i] = c;
  }
  return table;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Protobuf wire format: a key is (field << 3) | wire type; varints are 7 bits per byte, low first.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
template <typename T>
void put_fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}
void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 2);
  put_varint(out, bytes.size());
  out += bytes;
}
std::string event_header(double wall_time) {
  std::string e;
  put_varint(e, 1 << 3 | 1);  // wall_time: double
  put_fixed(e, wall_time);
  return e;
}

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  uint32_t c = 0xffffffffu;
  for (const char ch : bytes) c = table[(c ^ static_cast<uint8_t>(ch)) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& directory) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  MT_CHECK(!ec && std::filesystem::is_directory(directory), "--tensorboard: cannot create the folder '{}'{}", directory,
           ec ? ": " + ec.message() : std::string());
  path_ = (std::filesystem::path(directory) /
           fmt::format("events.out.tfevents.{}.mixtape", static_cast<int64_t>(now_seconds())))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  MT_CHECK(out_.good(), "--tensorboard: cannot write '{}'", path_);
  std::string first = event_header(now_seconds());
  put_bytes_field(first, 3, "brain.Event:2");  // file_version
  write_record(first);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  std::string v;
  put_bytes_field(v, 1, tag);
  put_varint(v, 2 << 3 | 5);  // simple_value: float
  put_fixed(v, static_cast<float>(value));
  std::string summary;
  put_bytes_field(summary, 1, v);  // Summary.value
  std::string e = event_header(now_seconds());
  put_varint(e, 2 << 3 | 0);  // step: int64 varint
  put_varint(e, static_cast<uint64_t>(step));
  put_bytes_field(e, 5, summary);
  write_record(e);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string length;
  put_fixed(length, static_cast<uint64_t>(data.size()));
  std::string record = length;
  put_fixed(record, masked_crc32c(length));
  record += data;
  put_fixed(record, masked_crc32c(data));
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  MT_CHECK(out_.good(), "--tensorboard: writing '{}' failed", path_);
}

void TensorBoardWriter::flush() { out_.flush(); }

}  // namespace mt::tools
