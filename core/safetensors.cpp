#include "core/safetensors.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace mt {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's limit

std::optional<DType> dtype_from_name(const std::string& name) {
  static const std::map<std::string, DType> names = {{"BOOL", kBool}, {"U8", kU8}, {"I8", kI8},     {"I32", kI32}, {"I64", kI64},
                                                     {"F16", kF16},   {"BF16", kBF16}, {"F32", kF32}, {"F64", kF64},
                                                     {"F8_E4M3", kF8E4M3}, {"F8_E5M2", kF8E5M2}};
  auto it = names.find(name);
  return it == names.end() ? std::nullopt : std::optional<DType>(it->second);
}

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    MT_CHECK(n > 0, "save_safetensors: writing '{}' failed: {}", path, std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

}  // namespace

std::string safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case kBool: return "BOOL";
    case kU8: return "U8";
    case kI8: return "I8";
    case kI32: return "I32";
    case kI64: return "I64";
    case kF16: return "F16";
    case kBF16: return "BF16";
    case kF32: return "F32";
    case kF64: return "F64";
    case kF8E4M3: return "F8_E4M3";
    case kF8E5M2: return "F8_E5M2";
  }
  return "?";
}

namespace {

// Removes `<path>.tmp.<pid>` files left by saves whose process is gone (a
// run killed while it wrote): a save in progress elsewhere (its process is
// alive) is left alone.
void remove_stale_temporaries(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path target = std::filesystem::absolute(path, ec);
  if (ec) return;
  const std::string prefix = target.filename().string() + ".tmp.";
  for (const auto& entry : std::filesystem::directory_iterator(target.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || !entry.is_regular_file(ec)) continue;
    const std::string digits = name.substr(prefix.size());
    pid_t pid = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || pid <= 0) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  remove_stale_temporaries(path);
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> contiguous;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    MT_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' is not a valid tensor name");
    Tensor host = t.device().is_cpu() ? t : t.to(kCPU);
    if (!host.is_contiguous()) host = host.contiguous();
    const uint64_t bytes = host.nbytes();
    header[name] = {{"dtype", safetensors_dtype_name(host.dtype())},
                    {"shape", host.sizes()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(host.detach());
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const uint64_t header_size = text.size();

  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  MT_CHECK(fd >= 0, "save_safetensors: cannot create '{}': {}", temp, std::strerror(errno));
  try {
    write_all(fd, &header_size, 8, temp);  // little-endian host
    write_all(fd, text.data(), text.size(), temp);
    for (const Tensor& t : contiguous) {
      if (t.nbytes() > 0) write_all(fd, t.data_ptr(), t.nbytes(), temp);
    }
    MT_CHECK(::fsync(fd) == 0, "save_safetensors: fsync of '{}' failed: {}", temp, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temp.c_str());
    fail("save_safetensors: cannot move the checkpoint into place at '{}': {}", path, reason);
  }
}

namespace {

// A SAX pass over the header that remembers the first key repeated in the
// top-level object; any syntax error throws as the parser does.
struct TopLevelKeys : nlohmann::json_sax<nlohmann::json> {
  int depth = 0;
  std::set<std::string> seen;
  std::string duplicate;

  bool key(string_t& k) override {
    if (depth == 1 && !seen.insert(k).second && duplicate.empty()) duplicate = k;
    return true;
  }
  bool start_object(std::size_t) override { return ++depth, true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return ++depth, true; }
  bool end_array() override { return --depth, true; }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override { throw e; }
};

// The file, checked to be a regular file long enough for the header it
// declares, and that header's text.
struct OpenedFile {
  std::ifstream in;
  uint64_t file_size = 0, header_size = 0;
  std::string header_text;
};

OpenedFile open_and_read_header(const std::string& path) {
  std::error_code ec;
  // A FIFO or a device would block the open or never end: regular files only.
  MT_CHECK(std::filesystem::exists(path, ec), "load_safetensors: cannot open '{}': it does not exist", path);
  MT_CHECK(std::filesystem::is_regular_file(path, ec), "load_safetensors: '{}' is not a regular file", path);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  MT_CHECK(in.good(), "load_safetensors: cannot open '{}'", path);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  MT_CHECK(file_size >= 8, "load_safetensors: '{}' is {} bytes, too short to be a safetensors file", path, file_size);
  in.seekg(0);
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  MT_CHECK(header_size <= kMaxHeaderBytes && 8 + header_size <= file_size,
           "load_safetensors: '{}' declares a {}-byte header but the file has {} bytes (truncated or not safetensors)",
           path, header_size, file_size);
  std::string text(header_size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_size));
  return {std::move(in), file_size, header_size, std::move(text)};
}

// Parse, rejecting duplicate tensor names (the parser would keep the last).
// Two linear passes: nlohmann's callback parser would find them in one,
// but it rescans each object as it closes, quadratic in the entry count
// (a header of 100k entries took minutes).
nlohmann::json parse_header(const std::string& path, const std::string& text) {
  std::string duplicate;
  nlohmann::json header;
  try {
    TopLevelKeys keys;
    nlohmann::json::sax_parse(text, &keys);
    duplicate = keys.duplicate;
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("load_safetensors: '{}' has a corrupt header: {}", path, e.what());
  }
  MT_CHECK(duplicate.empty(), "load_safetensors: '{}' names tensor '{}' twice", path, duplicate);
  MT_CHECK(header.is_object(), "load_safetensors: '{}': the header is not a JSON object", path);
  return header;
}

void read_metadata(const std::string& path, const nlohmann::json& value, std::map<std::string, std::string>& metadata) {
  MT_CHECK(value.is_object(), "load_safetensors: '{}': __metadata__ must be an object of strings", path);
  for (auto m = value.begin(); m != value.end(); ++m) {
    MT_CHECK(m->is_string(), "load_safetensors: '{}': metadata '{}' is not a string", path, m.key());
    metadata[m.key()] = m->get<std::string>();
  }
}

// One tensor's header entry, checked: its dtype, shape and the bytes
// [begin, end) it claims in the data, `expected` of them.
struct Entry {
  DType dtype;
  Shape shape;
  uint64_t begin, end, expected;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e, uint64_t data_size) {
  MT_CHECK(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets") &&
               e["dtype"].is_string() && e["shape"].is_array() && e["data_offsets"].is_array() &&
               e["data_offsets"].size() == 2,
           "load_safetensors: '{}': entry '{}' needs dtype, shape and data_offsets", path, name);
  const auto dtype = dtype_from_name(e["dtype"].get<std::string>());
  MT_CHECK(dtype.has_value(), "load_safetensors: '{}': tensor '{}' has dtype {}, which mixtape does not support", path,
           name, e["dtype"].get<std::string>());
  Shape shape;
  for (const auto& d : e["shape"]) {
    MT_CHECK(d.is_number_unsigned(), "load_safetensors: '{}': tensor '{}' has an invalid shape", path, name);
    shape.push_back(d.get<int64_t>());
  }
  MT_CHECK(e["data_offsets"][0].is_number_unsigned() && e["data_offsets"][1].is_number_unsigned(),
           "load_safetensors: '{}': tensor '{}' has data_offsets that are not byte offsets: {}", path, name,
           e["data_offsets"].dump());
  const auto begin = e["data_offsets"][0].get<uint64_t>(), end = e["data_offsets"][1].get<uint64_t>();
  const uint64_t expected =
      static_cast<uint64_t>(checked_numel(shape, element_size(*dtype), "load_safetensors")) * element_size(*dtype);
  MT_CHECK(begin <= end && end - begin == expected,
           "load_safetensors: '{}': tensor '{}' of shape {} needs {} bytes but its offsets [{}, {}] hold {}", path,
           name, shape_str(shape), expected, begin, end, end - begin);
  MT_CHECK(end <= data_size, "load_safetensors: '{}': tensor '{}' ends at byte {} past the {} data bytes (truncated)",
           path, name, end, data_size);
  return {*dtype, shape, begin, end, expected};
}

Tensor read_tensor(OpenedFile& f, const std::string& path, const std::string& name, const Entry& entry) {
  Tensor t = empty(entry.shape, entry.dtype);
  f.in.seekg(static_cast<std::streamoff>(8 + f.header_size + entry.begin));
  f.in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(entry.expected));
  MT_CHECK(f.in.good() || entry.expected == 0, "load_safetensors: '{}': reading tensor '{}' failed", path, name);
  return t;
}

struct Span {
  uint64_t begin, end;
  std::string name;
};

// The tensors must tile the data bytes exactly: no hole, no overlap.
void check_spans_cover_data(const std::string& path, std::vector<Span> spans, uint64_t data_size) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  uint64_t cursor = 0;
  for (const Span& s : spans) {
    MT_CHECK(s.begin == cursor,
             "load_safetensors: '{}': tensor '{}' starts at byte {} but the previous one ends at {} "
             "(a hole or an overlap)",
             path, s.name, s.begin, cursor);
    cursor = s.end;
  }
  MT_CHECK(cursor == data_size, "load_safetensors: '{}': the tensors cover {} bytes but the file holds {} data bytes",
           path, cursor, data_size);
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  OpenedFile f = open_and_read_header(path);
  const nlohmann::json header = parse_header(path, f.header_text);
  SafetensorsFile out;
  std::vector<Span> spans;
  const uint64_t data_size = f.file_size - 8 - f.header_size;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      read_metadata(path, *it, out.metadata);
      continue;
    }
    const Entry entry = parse_entry(path, it.key(), *it, data_size);
    spans.push_back({entry.begin, entry.end, it.key()});
    out.tensors[it.key()] = read_tensor(f, path, it.key(), entry);
  }
  check_spans_cover_data(path, std::move(spans), data_size);
  return out;
}

}  // namespace mt
