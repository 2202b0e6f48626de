// Errors a user can act on. Every check says what was expected, what was
// found, and (where it helps) what to do about it.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// An allocation that does not fit its device (or the device's budget). The
// message says what was being allocated, the usage by category, and how to
// make the run fit.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& what) : Error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace kiln

// KILN_CHECK(cond, "message parts", value, ...) throws kiln::Error when cond is false.
#define KILN_CHECK(cond, ...)                                          \
  do {                                                                 \
    if (!(cond)) throw ::kiln::Error(::kiln::detail::concat(__VA_ARGS__)); \
  } while (0)

#define KILN_FAIL(...) throw ::kiln::Error(::kiln::detail::concat(__VA_ARGS__))
