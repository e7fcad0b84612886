// The one rule every writer of the command line follows (train's --save,
// --log, --report and --tensorboard, compare's --out and --log-dir, report's
// --out, bench's --json): checked before any work, so a typo never costs the
// input it names, and a device node is never replaced by a regular file.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mt::tools {

// A path a command reads or writes and the flag that named it, for messages
// ("--resume", "the metrics log"). An empty path is an option not given.
struct NamedPath {
  std::string flag;
  std::string path;
};

// What a writer puts at its path: one file, or files inside a folder (TensorBoard).
enum class OutputKind { File, Folder };

struct OutputPath {
  OutputPath(std::string flag, std::string path, OutputKind kind = OutputKind::File, std::string may_replace = {})
      : flag(std::move(flag)), path(std::move(path)), kind(kind), may_replace(std::move(may_replace)) {}

  std::string flag;
  std::string path;
  OutputKind kind = OutputKind::File;
  // The one input this output may be, because it is that file's next
  // version: train --resume ck --save ck continues a checkpoint in place
  // (read whole at the start, replaced atomically at each save).
  std::string may_replace;
};

// mt::Error, naming both paths, when an output of `command` ("train",
// "report") is the same file as one of its inputs (other than the one it
// may replace) or as another of its
// outputs — after symlinks and "..", or by device and inode where both
// exist — or when what already sits at an output's path is not a regular
// file (a folder for OutputKind::Folder): a device, a FIFO, a socket.
void check_output_paths(const std::string& command, const std::vector<OutputPath>& outputs,
                        const std::vector<NamedPath>& inputs);

// Whether two paths name the same file, by the same rule.
bool same_file(const std::string& a, const std::string& b);

}  // namespace mt::tools
