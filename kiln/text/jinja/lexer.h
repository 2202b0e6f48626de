// Jinja's lexer as transformers configures it (trim_blocks, lstrip_blocks,
// no trailing-newline keeping): the template becomes text runs and the
// tokens inside {{ }} and {% %}, with the whitespace control (-, +) applied
// to the text and comments dropped.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::text::jinja {

struct Token {
  enum class Type { text, variable_begin, variable_end, block_begin, block_end, name, string, integer, floating, op, end };
  Type type;
  std::string text;  // a text run, a name, an operator, a string's value, a number's digits
  int line = 1;
};

// Throws TemplateError ("syntax error at line N: ...") on an unclosed tag,
// string or comment, or a character no token starts with.
std::vector<Token> tokenize(const std::string& source);

}  // namespace kiln::text::jinja
