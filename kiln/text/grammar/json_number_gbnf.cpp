#include "kiln/text/grammar/json_number_gbnf.h"

#include <algorithm>
#include <cctype>
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

namespace {

constexpr int64_t kMaxMultipleUnits = 200;
constexpr int kMaxMultiplePlaces = 6;

// "0.25" -> {25, 2}; "5" -> {5, 0}; "1e-05" -> {1, 5}; "2.5E1" -> {25, 0}.
std::pair<int64_t, int> decimal_units(const std::string& text) {
  std::string digits;
  int places = 0;
  size_t i = 0;
  for (bool fraction = false; i < text.size() && (std::isdigit(uint8_t(text[i])) || text[i] == '.'); ++i) {
    if (text[i] == '.') fraction = true;
    else digits += text[i], places += fraction;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) places -= std::stoi(text.substr(i + 1));
  else KILN_CHECK(i == text.size(), "'", text, "' is not a positive number");
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  for (; places > 0 && !digits.empty() && digits.back() == '0'; --places) digits.pop_back();
  for (; places < 0; ++places) digits += '0';
  KILN_CHECK(!digits.empty(), "multipleOf must be above 0");
  KILN_CHECK(places <= kMaxMultiplePlaces, "multipleOf ", text, " has more than ", kMaxMultiplePlaces,
             " decimal places; Kiln does not support it");
  KILN_CHECK(digits.size() <= 3 && std::stoll(digits) <= kMaxMultipleUnits, "multipleOf ", text, " is ", digits,
             " units of its last decimal place; Kiln supports at most ", kMaxMultipleUnits);
  return {std::stoll(digits), places};
}

}  // namespace

MultipleOfRules multiple_of_gbnf(const std::string& multiple, bool integer) {
  const std::pair<int64_t, int> units = decimal_units(multiple);
  const int64_t p = units.first;
  const int d = units.second;
  const int fraction_digits = integer ? 0 : d;
  // A state: remainder r of the digits so far; `integer_digits` of the
  // integer part (1-16) and then, after the point, `fraction` digits (0-d).
  struct State {
    int64_t r;
    int integer_digits, fraction;  // fraction -1: still in the integer part
  };
  std::vector<State> states;
  auto index = [&](int64_t r, int integer_digits, int fraction) {
    return fraction < 0 ? size_t(1 + (integer_digits - 1) * p + r)
                        : size_t(1 + kMaxDigits * p + fraction * p + r);
  };
  states.resize(1 + size_t(kMaxDigits + fraction_digits + 1) * size_t(p));
  for (int n = 1; n <= kMaxDigits; ++n)
    for (int64_t r = 0; r < p; ++r) states[index(r, n, -1)] = {r, n, -1};
  for (int j = 0; j <= fraction_digits; ++j)
    for (int64_t r = 0; r < p; ++r) states[index(r, 0, j)] = {r, 0, j};
  int64_t pow10[kMaxMultiplePlaces + 1] = {1};
  for (int i = 1; i <= kMaxMultiplePlaces; ++i) pow10[i] = pow10[i - 1] * 10 % p;
  // The number may end here: its digits, padded to d fraction digits, are a multiple of p.
  auto accepts = [&](const State& s) {
    if (s.fraction == 0) return false;  // a point needs a digit after it
    return s.r * pow10[d - std::max(s.fraction, 0)] % p == 0;
  };
  // (digit class, next state) moves; "." to the fraction's first state.
  auto moves = [&](const State& s) {
    std::vector<std::pair<std::string, size_t>> out;
    const bool more = s.fraction < 0 ? s.integer_digits < kMaxDigits : s.fraction < fraction_digits;
    std::vector<std::string> by_target(static_cast<size_t>(p));
    if (more)
      for (int c = 0; c <= 9; ++c) by_target[size_t((10 * s.r + c) % p)] += char('0' + c);
    for (int64_t t = 0; t < p; ++t)
      if (!by_target[size_t(t)].empty())
        out.emplace_back("[" + by_target[size_t(t)] + "]",
                         s.fraction < 0 ? index(t, s.integer_digits + 1, -1) : index(t, 0, s.fraction + 1));
    if (s.fraction < 0 && fraction_digits > 0) out.emplace_back("\".\"", index(s.r, 0, 0));
    return out;
  };
  // Live: the number can still end from here. Every move goes to a later
  // state in this order (more digits), so one backward pass decides it.
  std::vector<char> live(states.size(), 0), terminal(states.size(), 0);
  for (size_t i = states.size(); i-- > 1;) {
    bool any = false;
    for (const auto& [cls, next] : moves(states[i])) any = any || live[next];
    live[i] = accepts(states[i]) || any;
    terminal[i] = !any;
  }
  MultipleOfRules out;
  std::vector<std::string> rule_of(states.size());  // "@k@", or "" for a state that can only end
  auto body = [&](const State& s) {
    std::vector<std::string> alternatives;
    for (const auto& [cls, next] : moves(s))
      if (live[next]) alternatives.push_back(then(cls, rule_of[next]));
    std::string text = join(alternatives);
    if (alternatives.size() == 1 && text.find(' ') != std::string::npos) text = "( " + text + " )";
    return accepts(s) ? text + "?" : text;
  };
  out.bodies.emplace_back();
  for (size_t i = 1; i < states.size(); ++i)
    if (live[i] && !terminal[i]) {
      (rule_of[i] = std::to_string(out.bodies.size())).insert(0, 1, '@') += '@';
      out.bodies.emplace_back();
    }
  for (size_t i = 1, k = 1; i < states.size(); ++i)
    if (live[i] && !terminal[i]) out.bodies[k++] = body(states[i]);
  // The number: a sign, then "0" (a multiple of everything) or a first digit 1-9.
  std::vector<std::string> first{then("\"0\"", fraction_digits > 0 ? "( \".\" " + rule_of[index(0, 0, 0)] + " )?" : "")};
  std::vector<std::string> by_target(static_cast<size_t>(p));
  for (int c = 1; c <= 9; ++c) by_target[size_t(c % p)] += char('0' + c);
  for (int64_t t = 0; t < p; ++t)
    if (!by_target[size_t(t)].empty() && live[index(t, 1, -1)])
      first.push_back(then("[" + by_target[size_t(t)] + "]", rule_of[index(t, 1, -1)]));
  out.bodies[0] = "\"-\"? " + join(first);
  return out;
}

}  // namespace kiln::text
