// JSON Schema's numeric bounds (minimum, maximum, exclusiveMinimum,
// exclusiveMaximum) as a GBNF expression for exactly the numbers within
// them, so that a bounded field is honoured rather than refused.
//
// Integers take any bounds (a fractional bound is rounded inward). Numbers
// take whole-valued bounds: a written number's value is its integer part
// plus a fraction that is zero or strictly between 0 and 1, so for whole
// bounds each of the two cases admits an interval of integer parts, and a
// number's grammar is the integer grammar of those intervals with the
// fraction each allows. Bounded numbers are written without an exponent,
// and negative zero is not written: fewer spellings, the same values.
// Integer parts have at most 16 digits, as json-integer's.
#pragma once
#include <optional>
#include <string>

namespace kiln::text {

struct NumberBound {
  double value = 0;
  bool exclusive = false;
};

struct NumberBounds {
  std::optional<NumberBound> lower, upper;
};

// Throws kiln::Error when no number within reach satisfies the bounds, or
// (numbers) a bound is not whole.
std::string bounded_integer_gbnf(const NumberBounds& bounds);
std::string bounded_number_gbnf(const NumberBounds& bounds);

}  // namespace kiln::text
