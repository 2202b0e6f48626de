// Text that runs to the first occurrence of a mark, as a grammar: a
// reasoning model's thinking up to its end mark (kiln/text/reasoning.h), a
// MiniMax M3 argument's text up to its closing tag.
#pragma once
#include <string>
#include <string_view>

namespace kiln::text {

// GBNF rules `name`-0, `name`-1...: `name`-0 is any text in which `mark`
// does not occur, then `mark`.
std::string text_then_mark_gbnf(const std::string& name, std::string_view mark);

}  // namespace kiln::text
