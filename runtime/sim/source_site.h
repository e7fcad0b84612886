// Where a simulated thread called a waiting built-in (__syncthreads, a
// shuffle, mma): the file and line a deadlock or race report names.
//
// It is std::source_location where the standard library has it. Clang 14
// (Debian's, which builds the fuzzers) cannot compile libstdc++'s version
// (it needs __builtin_source_location), so there a stand-in with the same
// interface is built from the older builtins, without the column.
#pragma once

#include <version>

#if defined(__cpp_lib_source_location)
#include <source_location>
#endif

namespace mt::simulator {

#if defined(__cpp_lib_source_location)
using SourceSite = std::source_location;
#else
class SourceSite {
 public:
  static constexpr SourceSite current(const char* file = __builtin_FILE(), const char* function = __builtin_FUNCTION(),
                                      unsigned line = __builtin_LINE()) noexcept {
    SourceSite site;
    site.file_ = file;
    site.function_ = function;
    site.line_ = line;
    return site;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr unsigned line() const noexcept { return line_; }
  constexpr unsigned column() const noexcept { return 0; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  unsigned line_ = 0;
};
#endif

}  // namespace mt::simulator
