// What every fuzz target shares.
//
// mixtape's readers take paths (that is how other people's files reach
// them), so each input is written to a file first and read back through the
// real code path, size checks and all. The rule each target enforces: an
// mt::Error is the right answer to garbage. Any other exception (it reaches
// std::terminate), a crash, a sanitizer report, a leak or a hang is a bug,
// and libFuzzer saves the input that caused it.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "runtime/error.h"

namespace mt::fuzz {

// The folder of this fuzzing process (removed at exit), for input files and fixtures.
inline const std::filesystem::path& work_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() / ("mixtape-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  static const struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup;
  return dir;
}

// Writes `bytes` to work_dir()/name, replacing what was there.
inline std::string write_input(const std::string& name, const uint8_t* bytes, size_t size) {
  const std::string path = (work_dir() / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(bytes, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();  // the harness itself failed, not the reader
  }
  return path;
}

// Runs `read`; an mt::Error is a clean refusal (printed when
// MT_FUZZ_VERBOSE is set, to see why a seed is refused). Anything else propagates.
template <typename Read>
int refuses_cleanly(Read&& read) {
  static const bool verbose = std::getenv("MT_FUZZ_VERBOSE") != nullptr;
  try {
    read();
    if (verbose) std::fprintf(stderr, "fuzz: accepted\n");
  } catch (const Error& e) {
    if (verbose) std::fprintf(stderr, "fuzz: refused: %s\n", e.what());
  }
  return 0;
}

}  // namespace mt::fuzz
