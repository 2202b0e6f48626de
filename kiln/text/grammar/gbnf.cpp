#include "kiln/text/grammar/gbnf.h"

#include <algorithm>
#include <map>

#include "kiln/core/error.h"

namespace kiln::text {

bool GrammarElement::matches(uint32_t code_point) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) in = in || (lo <= code_point && code_point <= hi);
  return in != negated;
}

bool GrammarElement::matches_any_in(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& r : ranges)
      if (r.first <= hi && lo <= r.second) return true;
    return false;
  }
  // Some code point in [lo, hi] lies outside every range: walk the ranges in order.
  std::vector<std::pair<uint32_t, uint32_t>> sorted = ranges;
  std::sort(sorted.begin(), sorted.end());
  uint64_t next = lo;  // the lowest code point not yet known to be covered
  for (const auto& [a, b] : sorted) {
    if (a > next) break;
    next = std::max<uint64_t>(next, uint64_t(b) + 1);
  }
  return next <= hi;
}

namespace {

// llama.cpp's limits: repetitions above this many copies are refused ({m,n}
// with a larger n means {m,}), and so are grammars whose expansion grows past it.
constexpr uint64_t kMaxRepetitions = 2000;
constexpr size_t kMaxRules = 100000;
constexpr size_t kMaxText = 16 << 20;

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Grammar parse(const std::string& root) {
    KILN_CHECK(s_.size() <= kMaxText, "grammar: ", s_.size(), " bytes is more than the ", kMaxText, " accepted");
    skip_space(true);
    while (pos_ < s_.size()) parse_rule();
    for (size_t i = 0; i < g_.rules.size(); ++i)
      KILN_CHECK(defined_[i], "grammar: rule '", g_.rules[i].name, "' is used (line ", line_at(first_use_[i]),
                 ") but never defined");
    auto it = ids_.find(root);
    KILN_CHECK(it != ids_.end() && defined_[size_t(it->second)], "grammar: no rule named '", root,
               "', where matching starts (define `", root, " ::= ...`)");
    g_.root = it->second;
    check_left_recursion();
    check_matches_something();
    return std::move(g_);
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  Grammar g_;
  std::map<std::string, int> ids_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;  // where each rule is first named (its line is counted only for an error)
  uint64_t expanded_ = 0;  // rules made by repetitions, for the size bound

  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  bool at_end() const { return pos_ >= s_.size(); }

  [[noreturn]] void fail(const std::string& what) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    KILN_FAIL("grammar: ", what, " at line ", line, ", column ", column);
  }
  int line_at(size_t pos) const {
    return int(std::count(s_.begin(), s_.begin() + long(std::min(pos, s_.size())), '\n')) + 1;
  }

  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = peek();
      if (c == '#') {
        while (!at_end() && peek() != '\n' && peek() != '\r') ++pos_;
      } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (is_word_char(peek())) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(s_.substr(start, pos_ - start));
  }

  int rule_id(const std::string& name) {
    auto [it, added] = ids_.try_emplace(name, int(g_.rules.size()));
    if (added) new_rule(name);
    return it->second;
  }
  int new_rule(const std::string& name) {
    KILN_CHECK(g_.rules.size() < kMaxRules, "grammar: more than ", kMaxRules, " rules after expanding repetitions");
    g_.rules.push_back({name, {}});
    defined_.push_back(false);
    first_use_.push_back(pos_);
    return int(g_.rules.size()) - 1;
  }
  int synthesized(const std::string& base) {
    const int id = new_rule(base + "_" + std::to_string(g_.rules.size()));
    defined_[size_t(id)] = true;
    return id;
  }

  void parse_rule() {
    const std::string name = parse_name();
    skip_space(false);
    if (s_.substr(pos_, 3) != "::=") fail("expected ::= after the rule name '" + name + "'");
    pos_ += 3;
    skip_space(true);
    const int id = rule_id(name);
    if (defined_[size_t(id)]) fail("rule '" + name + "' is defined twice");
    defined_[size_t(id)] = true;
    std::vector<GrammarSequence> alternatives = parse_alternatives(name, false);
    g_.rules[size_t(id)].alternatives = std::move(alternatives);
    if (peek() == '\r') ++pos_;
    if (peek() == '\n') {
      ++pos_;
    } else if (!at_end()) {
      fail("expected the end of the line after rule '" + name + "'");
    }
    skip_space(true);
  }

  std::vector<GrammarSequence> parse_alternatives(const std::string& name, bool nested) {
    std::vector<GrammarSequence> alternatives;
    alternatives.push_back(parse_sequence(name, nested));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alternatives.push_back(parse_sequence(name, nested));
    }
    return alternatives;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) fail("expected " + std::to_string(digits) + " hex digits");
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    return v;
  }

  // One character of a literal or a class: an escape, or a UTF-8 character.
  uint32_t parse_char() {
    if (at_end()) fail("unexpected end of the grammar");
    if (peek() == '\\') {
      const char e = peek(1);
      pos_ += 2;
      switch (e) {
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        case 't': return '\t';
        case 'r': return '\r';
        case 'n': return '\n';
        case '\\': case '"': case '[': case ']': case '-': return uint32_t(uint8_t(e));
        default: pos_ -= 2; fail(std::string("unknown escape \\") + e);
      }
    }
    const uint8_t b = uint8_t(peek());
    const int len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (len == 0 || pos_ + size_t(len) > s_.size()) fail("invalid UTF-8");
    uint32_t v = len == 1 ? b : b & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const uint8_t c = uint8_t(s_[pos_ + size_t(i)]);
      if ((c & 0xC0) != 0x80) fail("invalid UTF-8");
      v = (v << 6) | (c & 0x3F);
    }
    pos_ += size_t(len);
    return v;
  }

  GrammarElement parse_class() {
    ++pos_;  // '['
    GrammarElement e;
    if (peek() == '^') {
      e.negated = true;
      ++pos_;
    }
    while (peek() != ']') {
      if (at_end()) fail("unterminated character class");
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']') {
        ++pos_;
        if (at_end()) fail("unterminated character class");
        hi = parse_char();
      }
      e.ranges.emplace_back(lo, hi);
    }
    ++pos_;  // ']'
    return e;
  }

  static GrammarElement single(uint32_t c) {
    GrammarElement e;
    e.ranges.emplace_back(c, c);
    return e;
  }
  static GrammarElement reference(int rule) {
    GrammarElement e;
    e.rule = rule;
    return e;
  }

  // x{min,max} (max < 0: unbounded) on the last item of `seq`, which starts at `item_start`:
  // x repeated min times, then a chain of optional rules, as llama.cpp rewrites it.
  void repeat(const std::string& name, GrammarSequence& seq, size_t item_start, uint64_t min, int64_t max) {
    if (item_start == seq.size()) fail("*, +, ? or { must follow an item");
    if (min > kMaxRepetitions) fail("more than " + std::to_string(kMaxRepetitions) + " repetitions");
    const bool unbounded = max < 0 || uint64_t(max) > kMaxRepetitions;
    if (!unbounded && uint64_t(max) < min) fail("a repetition's maximum is below its minimum");
    const GrammarSequence item(seq.begin() + long(item_start), seq.end());
    expanded_ += (unbounded ? std::max<uint64_t>(min, 1) : std::max<uint64_t>(uint64_t(max), 1)) * item.size();
    if (expanded_ > kMaxRules) fail("repetitions expand to more than " + std::to_string(kMaxRules) + " items");
    seq.resize(item_start);
    for (uint64_t i = 0; i < min; ++i) seq.insert(seq.end(), item.begin(), item.end());
    if (unbounded) {  // R ::= item R |
      const int r = synthesized(name);
      GrammarSequence again = item;
      again.push_back(reference(r));
      g_.rules[size_t(r)].alternatives = {again, {}};
      seq.push_back(reference(r));
      return;
    }
    int last = -1;  // R_k ::= item R_(k-1) |, innermost first
    for (uint64_t i = min; i < uint64_t(max); ++i) {
      const int r = synthesized(name);
      GrammarSequence body = item;
      if (last >= 0) body.push_back(reference(last));
      g_.rules[size_t(r)].alternatives = {body, {}};
      last = r;
    }
    if (last >= 0) seq.push_back(reference(last));
  }

  GrammarSequence parse_sequence(const std::string& name, bool nested) {
    GrammarSequence seq;
    size_t item_start = 0;
    while (!at_end()) {
      const char c = peek();
      if (c == '"') {
        ++pos_;
        item_start = seq.size();
        while (peek() != '"') {
          if (at_end()) fail("unterminated string");
          seq.push_back(single(parse_char()));
        }
        ++pos_;
      } else if (c == '[') {
        item_start = seq.size();
        seq.push_back(parse_class());
      } else if (c == '.') {
        ++pos_;
        item_start = seq.size();
        GrammarElement any;
        any.negated = true;  // the complement of nothing
        seq.push_back(any);
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        const int r = synthesized(name);
        std::vector<GrammarSequence> alternatives = parse_alternatives(name, true);
        g_.rules[size_t(r)].alternatives = std::move(alternatives);
        if (peek() != ')') fail("expected )");
        ++pos_;
        item_start = seq.size();
        seq.push_back(reference(r));
      } else if (c == '<' || c == '!') {
        fail("token references (<...>) are not supported");
      } else if (is_word_char(c)) {
        const std::string ref = parse_name();
        item_start = seq.size();
        seq.push_back(reference(rule_id(ref)));
      } else if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        repeat(name, seq, item_start, c == '+' ? 1 : 0, c == '?' ? 1 : -1);
        item_start = seq.size();
      } else if (c == '{') {
        ++pos_;
        skip_space(nested);
        const uint64_t min = parse_count();
        skip_space(nested);
        int64_t max = int64_t(min);
        if (peek() == ',') {
          ++pos_;
          skip_space(nested);
          max = is_digit(peek()) ? int64_t(std::min<uint64_t>(parse_count(), kMaxRepetitions + 1)) : -1;
          skip_space(nested);
        }
        if (peek() != '}') fail("expected } to close a repetition");
        ++pos_;
        repeat(name, seq, item_start, min, max);
        item_start = seq.size();
      } else {
        break;
      }
      skip_space(nested);
    }
    return seq;
  }

  uint64_t parse_count() {
    if (!is_digit(peek())) fail("expected a number");
    uint64_t v = 0;
    while (is_digit(peek())) {
      v = std::min<uint64_t>(v * 10 + uint64_t(peek() - '0'), uint64_t(1) << 40);
      ++pos_;
    }
    return v;
  }

  // A rule that can begin with itself would make a matcher expand forever.
  // As llama.cpp decides it (llama_grammar_detect_left_recursion): through
  // leftmost references, and past a reference only when that rule has an
  // empty alternative of its own; deeper cases meet the matcher's bound.
  // A grammar whose root can finish no text (every way through it recurses
  // forever, or meets a class no character is in) would have a model write
  // until its token limit: refused. A rule can finish once one of its
  // alternatives' rules all can (worked through from the rules that finish
  // by characters alone, each reference counted once: linear in the size).
  void check_matches_something() {
    const size_t n = g_.rules.size();
    struct Alternative {
      size_t rule, waiting = 0;  // references to rules not yet known to finish
      bool possible = true;      // no class that matches nothing
    };
    std::vector<Alternative> alternatives;
    std::vector<std::vector<size_t>> used_by(n);  // rule -> alternatives that refer to it, once per reference
    for (size_t r = 0; r < n; ++r)
      for (const GrammarSequence& seq : g_.rules[r].alternatives) {
        Alternative a{r};
        for (const GrammarElement& e : seq) {
          if (e.is_rule()) {
            ++a.waiting;
            used_by[size_t(e.rule)].push_back(alternatives.size());
          } else if (!e.matches_any_in(0, 0x10FFFF)) {
            a.possible = false;
          }
        }
        alternatives.push_back(a);
      }
    std::vector<bool> finishes(n, false);
    std::vector<size_t> ready;
    for (const Alternative& a : alternatives)
      if (a.possible && a.waiting == 0 && !finishes[a.rule]) finishes[a.rule] = true, ready.push_back(a.rule);
    while (!ready.empty()) {
      const size_t r = ready.back();
      ready.pop_back();
      for (size_t i : used_by[r]) {
        Alternative& a = alternatives[i];
        if (--a.waiting == 0 && a.possible && !finishes[a.rule]) finishes[a.rule] = true, ready.push_back(a.rule);
      }
    }
    KILN_CHECK(finishes[size_t(g_.root)], "grammar: rule '", g_.rules[size_t(g_.root)].name,
               "' matches no text: every way through it recurses without end (or needs a character no class "
               "takes); give its recursion a way out");
  }

  void check_left_recursion() {
    const size_t n = g_.rules.size();
    std::vector<bool> nullable(n, false);
    for (size_t r = 0; r < n; ++r)
      for (const GrammarSequence& seq : g_.rules[r].alternatives) nullable[r] = nullable[r] || seq.empty();
    // The rules each rule can start with.
    std::vector<std::vector<int>> starts(n);
    for (size_t r = 0; r < n; ++r)
      for (const GrammarSequence& seq : g_.rules[r].alternatives)
        for (const GrammarElement& e : seq) {
          if (!e.is_rule()) break;
          starts[r].push_back(e.rule);
          if (!nullable[size_t(e.rule)]) break;
        }
    // Depth-first, with an explicit stack: repetitions make chains thousands of rules long.
    std::vector<int> state(n, 0);  // 0 unvisited, 1 on the path, 2 done
    std::vector<std::pair<int, size_t>> path;  // rule, next edge
    for (size_t first = 0; first < n; ++first) {
      if (state[first] != 0) continue;
      path.push_back({int(first), 0});
      state[first] = 1;
      while (!path.empty()) {
        auto& [r, edge] = path.back();
        if (edge == starts[size_t(r)].size()) {
          state[size_t(r)] = 2;
          path.pop_back();
          continue;
        }
        const int s = starts[size_t(r)][edge++];
        if (state[size_t(s)] == 1)
          KILN_FAIL("grammar: rule '", g_.rules[size_t(s)].name, "' is left-recursive (it can begin with itself); ",
                    "rewrite it with repetition, e.g. x ::= y (\",\" y)*");
        if (state[size_t(s)] == 0) {
          state[size_t(s)] = 1;
          path.push_back({s, 0});
        }
      }
    }
  }
};

}  // namespace

std::string unused_rule_prefix(const Grammar& g, std::string base) {
  while (std::any_of(g.rules.begin(), g.rules.end(), [&](const GrammarRule& r) { return r.name.starts_with(base); }))
    base += "x";
  return base;
}

Grammar parse_gbnf(std::string_view text, const std::string& root) {
  Grammar g = Parser(text).parse(root);
  g.source = std::string(text) + "\n# root: " + root;
  return g;
}

}  // namespace kiln::text
