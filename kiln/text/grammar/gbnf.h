// GBNF, the grammar notation llama.cpp's constrained decoding reads
// (grammars/README.md there), parsed into rules of alternatives of element
// sequences. An element is a set of code points or a reference to a rule;
// repetitions (`*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`) and groups become rules
// of their own, as llama.cpp expands them, so a matcher only ever sees
// characters and references. Checked when parsed: every referenced rule is
// defined, the root exists, no rule is left-recursive (a matcher would loop),
// and sizes stay bounded. Errors name the line and column.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::text {

struct GrammarElement {
  // A code point set (ranges, inclusive; `negated` takes the complement) or a rule.
  int rule = -1;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool negated = false;

  bool is_rule() const { return rule >= 0; }
  bool matches(uint32_t code_point) const;
  // Whether some code point in [lo, hi] is in the set (a partial UTF-8 character's possible completions).
  bool matches_any_in(uint32_t lo, uint32_t hi) const;
};

using GrammarSequence = std::vector<GrammarElement>;

struct GrammarRule {
  std::string name;  // as written, or "<name>_<n>" for rules made from groups and repetitions
  std::vector<GrammarSequence> alternatives;
};

struct Grammar {
  std::vector<GrammarRule> rules;
  int root = -1;
  std::string source;  // the text it was parsed from, with its root: two grammars of one source are the same
};

// Parses GBNF text; `root` names the start rule. Throws kiln::Error.
Grammar parse_gbnf(std::string_view text, const std::string& root = "root");

// `base`, lengthened until no rule of `g` starts with it: a prefix for the
// rules of a grammar built around `g` (a user's GBNF names its rules freely).
std::string unused_rule_prefix(const Grammar& g, std::string base);

}  // namespace kiln::text
