// mt::Error — the one exception type mixtape throws for bad input.
//
// Messages name the op, the shapes/dtypes/devices involved and what was
// expected, so a user can fix the call without reading mixtape's source.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace mt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// An allocation the device (or a memory limit) could not serve: a search for
// the largest batch that fits catches this one and no other error.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// Throws mt::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace mt

// MT_CHECK(cond, "op: expected {} but got {}", a, b) throws mt::Error when cond is false.
#define MT_CHECK(cond, ...)               \
  do {                                    \
    if (!(cond)) ::mt::fail(__VA_ARGS__); \
  } while (0)
