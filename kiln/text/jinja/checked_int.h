// A template's integers are 64-bit where Python's have no bound, so an
// operation that would leave 64 bits is refused with a clear error instead
// of wrapping (undefined behaviour in C++, a silently wrong number in the
// rendered prompt). Sizes computed from template integers saturate, so a
// size check sees "too large" rather than a wrapped small number.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "kiln/text/jinja/value.h"

namespace kiln::text::jinja {

inline int64_t checked_result(bool overflowed, int64_t result, const char* op) {
  if (overflowed)
    throw TemplateError(std::string("integer overflow: the result of '") + op +
                        "' does not fit in 64 bits (Kiln's template integers are 64-bit)");
  return result;
}
inline int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  const bool overflowed = __builtin_add_overflow(a, b, &r);  // before r is read: argument order is unspecified
  return checked_result(overflowed, r, "+");
}
inline int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r;
  const bool overflowed = __builtin_sub_overflow(a, b, &r);  // before r is read: argument order is unspecified
  return checked_result(overflowed, r, "-");
}
inline int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  const bool overflowed = __builtin_mul_overflow(a, b, &r);  // before r is read: argument order is unspecified
  return checked_result(overflowed, r, "*");
}
inline int64_t checked_neg(int64_t a) { return checked_sub(0, a); }

// Python's int(x) for a float: truncation, refused where the value leaves
// 64 bits; Python's own message for infinity and NaN.
inline int64_t float_to_int(double x) {
  if (std::isnan(x)) throw TemplateError("cannot convert float NaN to integer");
  if (std::isinf(x)) throw TemplateError("cannot convert float infinity to integer");
  const double t = std::trunc(x);
  if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", x);
    throw TemplateError(std::string("integer overflow: the float ") + text + " does not fit in a 64-bit integer");
  }
  return int64_t(t);
}

// Python's % (b != 0): the sign of the divisor, from C's remainder (a - (a // b) * b can leave 64 bits).
inline int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 is undefined in C++
  const int64_t r = a % b;
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

inline size_t saturating_size_mul(size_t a, size_t b) {
  size_t r;
  return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}
inline size_t saturating_size_add(size_t a, size_t b) {
  size_t r;
  return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

}  // namespace kiln::text::jinja
