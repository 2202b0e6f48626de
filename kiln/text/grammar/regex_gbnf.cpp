#include "kiln/text/grammar/regex_gbnf.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/text/utf8.h"

namespace kiln::text {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr int kMaxRepeat = 1000;
constexpr int kMaxDepth = 64;

// What a JSON string holds unescaped: no ", no \, no control characters.
const Ranges kUnescaped = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
// What an XML-style tool parameter holds: no '<' (it could begin the
// closing tag), no control characters but tab and line breaks.
const Ranges kParameterText = {{0x09, 0x0A}, {0x0D, 0x0D}, {0x20, 0x3B}, {0x3D, 0x10FFFF}};

// Where the matched text goes: inside a JSON string's quotes (escaped), or
// as raw parameter text.
struct Container {
  const Ranges& allowed;  // what classes and '.' may take
  bool json;
};

Ranges intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  for (const auto& [lo, hi] : a)
    for (const auto& [blo, bhi] : b)
      if (std::max(lo, blo) <= std::min(hi, bhi)) out.emplace_back(std::max(lo, blo), std::min(hi, bhi));
  return out;
}

Ranges complement(const Ranges& a) {  // of a sorted, merged set
  Ranges sorted = a, out;
  std::sort(sorted.begin(), sorted.end());
  uint32_t next = 0;
  for (const auto& [lo, hi] : sorted) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = std::max(next, hi + 1);
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

std::string class_of(const Ranges& ranges) {
  if (ranges.empty()) KILN_FAIL("a class matches no character that can be written here unescaped");
  std::string out = "[";
  char buf[32];
  for (const auto& [lo, hi] : ranges) {
    std::snprintf(buf, sizeof buf, "\\U%08X", unsigned(lo));
    out += buf;
    if (hi != lo) {
      std::snprintf(buf, sizeof buf, "-\\U%08X", unsigned(hi));
      out += buf;
    }
  }
  return out + "]";
}

// A character the pattern asks for literally, as the container spells it.
std::string literal_of(uint32_t c, const Container& container) {
  std::string text;
  if (!container.json) {
    if (intersect({{c, c}}, container.allowed).empty()) {
      utf8_append(text, c);
      KILN_FAIL("pattern asks for '", c < 0x20 ? "\\x" + std::to_string(c) : text,
                "', which a tool parameter's text cannot hold (it could begin the closing tag)");
    }
    char buf[16];
    if (c < 0x20) {
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      return "\"" + std::string(buf) + "\"";
    }
    utf8_append(text, c);
  } else if (c == '"' || c == '\\') {
    text = {'\\', char(c)};
  } else if (c < 0x20) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
    text = buf;
  } else {
    utf8_append(text, c);
  }
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

class Translator {
 public:
  Translator(const std::string& pattern, Container container)
      : p_(utf8_code_points(pattern)), text_(pattern), container_(container) {}

  std::string translate() {
    if (p_.size() < 2 || p_.front() != '^' || p_.back() != '$')
      fail("must start with ^ and end with $ (a grammar holds the whole string; llama.cpp requires the same)");
    pos_ = 1;
    end_ = p_.size() - 1;
    const std::string body = alternation(0);
    if (pos_ != end_) fail("has an unmatched ')'");
    return container_.json ? "\"\\\"\" " + body + " \"\\\"\"" : body;
  }

 private:
  std::vector<uint32_t> p_;
  const std::string& text_;
  const Container container_;
  size_t pos_ = 0, end_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    KILN_FAIL("pattern ", text_, " ", what, pos_ ? " (at character " + std::to_string(pos_) + ")" : "");
  }
  bool more() const { return pos_ < end_; }
  uint32_t peek() const { return p_[pos_]; }

  std::string alternation(int depth) {
    if (depth > kMaxDepth) fail("nests groups too deeply");
    std::string out = "( " + sequence(depth);
    while (more() && peek() == '|') {
      ++pos_;
      out += " | " + sequence(depth);
    }
    return out + " )";
  }

  std::string sequence(int depth) {
    std::string out;
    while (more() && peek() != '|' && peek() != ')') {
      const std::string item = atom(depth);
      out += ' ';
      out += quantified(item);
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string quantified(const std::string& item) {
    if (!more()) return item;
    std::string suffix;
    const uint32_t c = peek();
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      suffix = std::string(1, char(c));
    } else if (c == '{') {
      const size_t start = pos_;
      ++pos_;
      const int m = number();
      int n = m;
      if (more() && peek() == ',') {
        ++pos_;
        n = more() && peek() != '}' ? number() : -1;
      }
      if (!more() || peek() != '}') {
        pos_ = start;
        fail("has a '{' that is not a quantifier {m}, {m,} or {m,n}");
      }
      ++pos_;
      if (n >= 0 && n < m) fail("has a quantifier whose maximum is below its minimum");
      suffix = "{";
      suffix += std::to_string(m);
      if (n != m) {
        suffix += ',';
        if (n >= 0) suffix += std::to_string(n);
      }
      suffix += '}';
    } else {
      return item;
    }
    if (more() && peek() == '?') ++pos_;  // lazy: the same strings
    std::string out = "( ";
    out += item;
    out += " )";
    return out + suffix;
  }

  int number() {
    int n = 0;
    bool any = false;
    while (more() && peek() >= '0' && peek() <= '9') {
      n = n * 10 + int(peek() - '0');
      if (n > kMaxRepeat) fail("repeats more than " + std::to_string(kMaxRepeat) + " times");
      ++pos_;
      any = true;
    }
    if (!any) fail("has a quantifier without a number");
    return n;
  }

  std::string atom(int depth) {
    const uint32_t c = p_[pos_++];
    switch (c) {
      case '(': {
        if (more() && peek() == '?') {
          if (pos_ + 1 < end_ && p_[pos_ + 1] == ':') {
            pos_ += 2;
          } else {
            fail("has a lookaround or named group ((?...), which a grammar cannot express");
          }
        }
        std::string inner = alternation(depth + 1);
        if (!more() || peek() != ')') fail("has an unclosed '('");
        ++pos_;
        return inner;
      }
      case '[':
        return bracket();
      case '.':
        return class_of(intersect(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}), container_.allowed));
      case '\\':
        return escape();
      case '*': case '+': case '?': case '{':
        --pos_;
        fail("has a quantifier with nothing before it");
      case '^': case '$':
        --pos_;
        fail("has an anchor inside it (only ^ at the start and $ at the end are taken)");
      default:
        return literal_of(c, container_);
    }
  }

  // \d \w \s and their negations, as ranges.
  static bool class_escape(uint32_t c, Ranges& out) {
    static const Ranges digit = {{'0', '9'}}, word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
                        space = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}};
    switch (c) {
      case 'd': out = digit; return true;
      case 'D': out = complement(digit); return true;
      case 'w': out = word; return true;
      case 'W': out = complement(word); return true;
      case 's': out = space; return true;
      case 'S': out = complement(space); return true;
      default: return false;
    }
  }

  // The character an escape stands for (outside \d-style classes).
  uint32_t escaped_char() {
    if (!more()) fail("ends with a lone '\\'");
    const uint32_t c = p_[pos_++];
    switch (c) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'b': case 'B':
        --pos_;
        fail("has a word boundary (\\b), which a grammar of characters cannot express");
      case 'u': case 'x': {
        const size_t digits = c == 'u' ? 4 : 2;
        uint32_t v = 0;
        for (size_t i = 0; i < digits; ++i) {
          if (!more() || peek() > 0x7F || !std::isxdigit(int(peek())))
            fail("has a \\x or \\u escape without its hex digits");
          const uint32_t d = peek();
          v = v * 16 + (d <= '9' ? d - '0' : (d | 0x20) - 'a' + 10);
          ++pos_;
        }
        return v;
      }
      default:
        if (c >= '1' && c <= '9') {
          --pos_;
          fail("has a backreference, which a grammar cannot express");
        }
        return c;  // \. \- \/ \( ...: the character itself
    }
  }

  std::string escape() {
    Ranges ranges;
    if (more() && class_escape(peek(), ranges)) {
      ++pos_;
      return class_of(intersect(ranges, container_.allowed));
    }
    return literal_of(escaped_char(), container_);
  }

  std::string bracket() {
    const bool negated = more() && peek() == '^';
    if (negated) ++pos_;
    Ranges ranges;
    bool first = true;
    while (more() && (peek() != ']' || first)) {
      first = false;
      uint32_t lo;
      if (peek() == '\\') {
        ++pos_;
        Ranges escaped;
        if (more() && class_escape(peek(), escaped)) {
          ++pos_;
          ranges.insert(ranges.end(), escaped.begin(), escaped.end());
          continue;
        }
        lo = escaped_char();
      } else {
        lo = p_[pos_++];
      }
      uint32_t hi = lo;
      if (pos_ + 1 < end_ && peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          hi = escaped_char();
        } else {
          hi = p_[pos_++];
        }
        if (hi < lo) fail("has a class range whose end is before its start");
      }
      ranges.emplace_back(lo, hi);
    }
    if (!more()) fail("has an unclosed '['");
    ++pos_;
    return class_of(intersect(negated ? complement(ranges) : ranges, container_.allowed));
  }
};

}  // namespace

std::string json_string_pattern_gbnf(const std::string& pattern) {
  return Translator(pattern, {kUnescaped, true}).translate();
}

std::string parameter_text_pattern_gbnf(const std::string& pattern) {
  return Translator(pattern, {kParameterText, false}).translate();
}

}  // namespace kiln::text
