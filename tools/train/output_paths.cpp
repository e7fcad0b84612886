#include "tools/train/output_paths.h"

#include <filesystem>

#include "runtime/error.h"

namespace mt::tools {

namespace fs = std::filesystem;

namespace {

// The path with symlinks and ".." resolved as far as it exists, the rest
// spelled lexically normal: two spellings of one file give one answer.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  if (ec) return fs::path(path).lexically_normal();
  const fs::path canonical = fs::weakly_canonical(absolute, ec);
  return ec ? absolute.lexically_normal() : canonical;
}

const char* describe_type(fs::file_type type) {
  switch (type) {
    case fs::file_type::regular: return "a regular file";
    case fs::file_type::directory: return "a folder";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

// What already sits at an output's path (through symlinks) must be what the
// writer makes; nothing there is fine, the writer creates it.
void check_output_type(const std::string& command, const OutputPath& output) {
  std::error_code ec;
  const fs::file_status status = fs::status(output.path, ec);
  if (ec || !fs::exists(status)) return;  // nothing there (or unreadable: the writer says why)
  const bool folder = output.kind == OutputKind::Folder;
  const bool fits = folder ? fs::is_directory(status) : fs::is_regular_file(status);
  MT_CHECK(fits, "{}: {} '{}' is {}; {} writes {} there and will not replace it", command, output.flag, output.path,
           describe_type(status.type()), output.flag, folder ? "a folder of files" : "a regular file");
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec) && !ec) return true;  // one device and inode: hard links, bind mounts
  return resolved(a) == resolved(b);
}

void check_output_paths(const std::string& command, const std::vector<OutputPath>& outputs,
                        const std::vector<NamedPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const OutputPath& output = outputs[i];
    if (output.path.empty()) continue;
    for (const NamedPath& input : inputs) {
      if (input.path.empty() || input.flag == output.may_replace || !same_file(output.path, input.path)) continue;
      fail("{}: {} '{}' is the same file as {} '{}' ({}): writing it would destroy the input; choose another path",
           command, output.flag, output.path, input.flag, input.path, resolved(input.path).string());
    }
    for (size_t j = 0; j < i; ++j) {
      const OutputPath& earlier = outputs[j];
      if (earlier.path.empty() || !same_file(output.path, earlier.path)) continue;
      fail("{}: {} '{}' and {} '{}' are the same file ({}): one would overwrite the other; give each its own path",
           command, earlier.flag, earlier.path, output.flag, output.path, resolved(output.path).string());
    }
    check_output_type(command, output);
  }
}

}  // namespace mt::tools
