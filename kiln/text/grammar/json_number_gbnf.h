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
#include <vector>

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

// multipleOf: the numbers (integers when `integer`) that are whole multiples
// of `multiple` (its JSON text, m = p x 10^-d), as a finite automaton over
// the digits: a state is the remainder modulo p of the digits so far read as
// one whole number, with how many integer digits (at most 16, as
// json-integer) or fraction digits (at most d: a multiple has no other
// nonzero ones) it has read. Written without an exponent, with at most d
// fraction digits: fewer spellings, the same values. Rule i's body names
// rule k as "@k@"; rule 0 is the number. Throws kiln::Error for m <= 0, more
// than 6 decimal places, or p above 200 (the grammar grows with p).
struct MultipleOfRules {
  std::vector<std::string> bodies;
};
MultipleOfRules multiple_of_gbnf(const std::string& multiple, bool integer);

}  // namespace kiln::text
