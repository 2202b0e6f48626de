// JSON Schema's `pattern` (an ECMA-262 regular expression) as a GBNF
// expression for the JSON string whose contents match it, as llama.cpp's
// json-schema-to-grammar translates it. Taken: literals and escapes,
// classes ([a-z], [^...], \d \w \s and their negations), `.`, groups
// ((...) and (?:...)), alternation, and the quantifiers * + ? {m} {m,}
// {m,n} (lazy forms too: a grammar has no preference). The pattern must be
// anchored at both ends (^...$), as llama.cpp requires: JSON Schema's
// pattern matches anywhere, which a grammar of the whole string could only
// honour by allowing anything around it. Refused by name: backreferences,
// lookarounds, word boundaries, and other anchors. Characters a JSON
// string must escape (", \ and controls) are written escaped when a
// literal asks for them; classes and `.` leave them out.
#pragma once
#include <string>

namespace kiln::text {

// Throws kiln::Error naming what in the pattern is not taken, and where.
std::string json_string_pattern_gbnf(const std::string& pattern);
// The same for raw text (an XML-style tool parameter's value, as Qwen3-Coder
// writes them): literals unescaped, and no '<' anywhere, so that the value
// cannot run into its closing tag.
std::string parameter_text_pattern_gbnf(const std::string& pattern);

}  // namespace kiln::text
