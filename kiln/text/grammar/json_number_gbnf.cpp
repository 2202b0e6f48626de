#include "kiln/text/grammar/json_number_gbnf.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::text {

namespace {

constexpr int kMaxDigits = 16;
constexpr int64_t kLargest = 9999999999999999;  // the largest integer part json-integer writes

std::string join(const std::vector<std::string>& alternatives) {
  if (alternatives.size() == 1) return alternatives[0];
  std::string out = "( ";
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out + " )";
}

std::string any_digits(size_t count) { return count == 0 ? "" : " [0-9]{" + std::to_string(count) + "}"; }

// Built by appending: GCC 12 warns (falsely, -Wrestrict) on "..." + string here.
std::string quoted(const std::string& digits) {
  std::string out(1, '"');
  out += digits;
  out += '"';
  return out;
}

std::string then(std::string first, const std::string& rest) { return rest.empty() ? first : first += " " + rest; }

bool all(const std::string& digits, char c) { return digits.find_first_not_of(c) == std::string::npos; }

// Digit strings of one length from `low` to `high` (low <= high): the
// common leading digits, then three parts (low's first digit and above
// the rest of low, the first digits strictly between, high's first digit
// and below the rest of high), the outer two dropped where they are whole.
std::string digits_between(const std::string& low, const std::string& high) {
  if (low.empty()) return "";
  if (low == high) return quoted(low);
  const std::string low_rest = low.substr(1), high_rest = high.substr(1);
  if (low[0] == high[0]) return then(quoted(low.substr(0, 1)), digits_between(low_rest, high_rest));
  const bool low_whole = all(low_rest, '0'), high_whole = all(high_rest, '9');
  const char from = char(low[0] + (low_whole ? 0 : 1)), to = char(high[0] - (high_whole ? 0 : 1));
  std::vector<std::string> parts;
  if (!low_whole)
    parts.push_back(then(quoted(low.substr(0, 1)), digits_between(low_rest, std::string(low_rest.size(), '9'))));
  if (from <= to) {
    std::string range = "[";
    range += from;
    range += '-';
    range += to;
    parts.push_back((range += ']') += any_digits(low_rest.size()));
  }
  if (!high_whole)
    parts.push_back(then(quoted(high.substr(0, 1)), digits_between(std::string(high_rest.size(), '0'), high_rest)));
  return join(parts);
}

// The integers from `low` to `high` (0 <= low <= high <= kLargest), spelled
// without leading zeros; lengths whose every value is in range share one
// repetition.
std::string integers_between(int64_t low, int64_t high) {
  const std::string lo = std::to_string(low), hi = std::to_string(high);
  std::vector<std::string> parts;
  size_t whole_from = 0, whole_to = 0;  // lengths (>= 2) wholly inside the range
  for (size_t length = lo.size(); length <= hi.size(); ++length) {
    const std::string first = length == lo.size() ? lo : std::string(1, '1').append(length - 1, '0');
    const std::string last = length == hi.size() ? hi : std::string(length, '9');
    if (length >= 2 && all(first.substr(1), '0') && first[0] == '1' && all(last, '9')) {
      if (!whole_from) whole_from = length;
      whole_to = length;
    } else {
      parts.push_back(digits_between(first, last));
    }
  }
  if (whole_from)
    parts.push_back("[1-9] [0-9]{" + std::to_string(whole_from - 1) + "," + std::to_string(whole_to - 1) + "}");
  return join(parts);
}

// Integer parts from `low` to `high`, each clamped into what can be written.
struct Span {
  const char* sign;
  int64_t low, high;
  std::string fraction;
};

std::string spans_gbnf(const std::vector<Span>& spans, const char* what, const NumberBounds& bounds) {
  std::vector<std::string> parts;
  for (const Span& s : spans) {
    const int64_t low = std::max<int64_t>(s.low, 0), high = std::min(s.high, kLargest);
    if (low <= high) parts.push_back(s.sign + ("( " + integers_between(low, high) + " )") + s.fraction);
  }
  if (parts.empty()) {
    auto bound = [](const std::optional<NumberBound>& b, const char* inclusive, const char* exclusive) {
      std::ostringstream out;
      if (b) out << (b->exclusive ? exclusive : inclusive) << " " << b->value;
      return out.str();
    };
    KILN_FAIL("no ", what, " with at most ", kMaxDigits, " digits is ",
              bound(bounds.lower, ">=", ">") + (bounds.lower && bounds.upper ? " and " : "") +
                  bound(bounds.upper, "<=", "<"));
  }
  return join(parts);
}

// A bound clamped into int64 (beyond what can be written, it bounds nothing).
int64_t clamp(double v) { return int64_t(std::clamp(v, -double(kLargest) - 1, double(kLargest) + 1)); }

}  // namespace

std::string bounded_integer_gbnf(const NumberBounds& bounds) {
  // Whole bounds, inclusive: x > 2.5 and x >= 3 admit the same integers.
  const int64_t low = !bounds.lower ? -kLargest
                      : bounds.lower->exclusive ? clamp(std::floor(bounds.lower->value)) + 1
                                                : clamp(std::ceil(bounds.lower->value));
  const int64_t high = !bounds.upper ? kLargest
                       : bounds.upper->exclusive ? clamp(std::ceil(bounds.upper->value)) - 1
                                                 : clamp(std::floor(bounds.upper->value));
  // x = I or x = -I (I >= 1: negative zero is not written).
  return spans_gbnf({{"", low, high, ""}, {"\"-\" ", std::max<int64_t>(-high, 1), -low, ""}}, "integer", bounds);
}

std::string bounded_number_gbnf(const NumberBounds& bounds) {
  for (const auto& b : {bounds.lower, bounds.upper})
    KILN_CHECK(!b || b->value == std::floor(b->value), "a bound of ", b ? b->value : 0.0,
               " on a number is not supported (only whole bounds are; use \"type\": \"integer\", or scale the "
               "quantity so that its bounds are whole)");
  const int64_t lo = bounds.lower ? clamp(bounds.lower->value) : -kLargest - 1;
  const int64_t hi = bounds.upper ? clamp(bounds.upper->value) : kLargest + 1;
  const int64_t lo_excl = bounds.lower && bounds.lower->exclusive, hi_excl = bounds.upper && bounds.upper->exclusive;
  const std::string zero = " ( \".\" \"0\"{1,16} )?";
  const std::string nonzero = " \".\" \"0\"{0,15} [1-9] [0-9]{0,15}";
  // With whole bounds, a written I (+ zero fraction) is in range when I is,
  // and I.f with 0 < f < 1 is when all of (I, I + 1) is: lo <= I and
  // I + 1 <= hi, whichever bounds are exclusive. Negatives mirror it.
  return spans_gbnf({{"", lo + lo_excl, hi - hi_excl, zero},
                     {"", lo, hi - 1, nonzero},
                     {"\"-\" ", std::max<int64_t>(-hi + hi_excl, 1), -lo - lo_excl, zero},
                     {"\"-\" ", -hi, -lo - 1, nonzero}},
                    "number", bounds);
}

}  // namespace kiln::text
