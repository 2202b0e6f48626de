// Whitespace as the chat-answer readers skip and trim it: JSON's (space,
// tab, line feed, carriage return), which is also what the templates put
// around their marks.
#pragma once
#include <string_view>

namespace kiln::text {

inline bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// `s` less the whitespace it starts with.
inline std::string_view unspaced(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

// `s` less the whitespace around it.
inline std::string_view trimmed(std::string_view s) {
  s = unspaced(s);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace kiln::text
