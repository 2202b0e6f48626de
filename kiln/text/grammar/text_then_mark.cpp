#include "kiln/text/grammar/text_then_mark.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "kiln/text/grammar/json_schema.h"
#include "kiln/text/utf8.h"

namespace kiln::text {

// KMP's automaton over the mark's code points: rule q is the state
// after text that ends with q of them, and the text may end (with the whole
// mark) where writing it there does not complete it early.
std::string text_then_mark_gbnf(const std::string& name, std::string_view mark) {
  const std::vector<uint32_t> m = utf8_code_points(mark);
  std::vector<size_t> fail(m.size() + 1, 0);
  for (size_t i = 1, k = 0; i < m.size(); ++i) {
    while (k > 0 && m[i] != m[k]) k = fail[k];
    if (m[i] == m[k]) ++k;
    fail[i + 1] = k;
  }
  auto next = [&](size_t q, uint32_t c) {
    while (q > 0 && m[q] != c) q = fail[q];
    return m[q] == c ? q + 1 : 0;
  };
  std::vector<uint32_t> distinct = m;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  auto escaped = [](uint32_t c) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\U%08X", c);
    return std::string(buf);
  };
  std::string others = "[^", rules;
  for (uint32_t c : distinct) others += escaped(c);
  others += "]";
  auto state = [&](size_t q) { return name + "-" + std::to_string(q); };
  for (size_t q = 0; q < m.size(); ++q) {
    std::string body = others + " " + state(0);
    for (uint32_t c : distinct)
      if (const size_t n = next(q, c); n < m.size()) body += " | [" + escaped(c) + "] " + state(n);
    size_t s = q, i = 0;
    while (i < m.size() && (s = next(s, m[i])) < m.size()) ++i;
    if (i + 1 == m.size()) body += " | " + gbnf_literal(std::string(mark));
    rules += state(q) + " ::= " + body + "\n";
  }
  return rules;
}

}  // namespace kiln::text
