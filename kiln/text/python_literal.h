// Python literals, as some families write a tool call's arguments (LFM2's
// [NAME(KEY=VALUE, ...)], and templates' `{{ value }}` of a dict or a
// list): read as the JSON they stand for, as llama.cpp's and vLLM's
// pythonic parsers read them.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace kiln::text {

struct PythonLiteral {
  enum class Scan { kDone, kPartial, kBad } scan;
  size_t end = 0;      // where the literal ends in the text (kDone)
  std::string json{};  // the JSON text it stands for (kDone)
};

// The literal at `pos` in `text` (whitespace before it skipped): a string
// in either quotes (JSON's escapes, \' and \xHH; another backslash stays),
// a number, True/False/None or JSON's true/false/null, or a list, tuple or
// dict of them (a dict's keys strings). kPartial when the text ends before
// it does, kBad when it is not one (or nests deeper than 64). With a
// `raw_quote` (Gemma's <|"|>), a string is the raw text between two of it,
// and a dict's key may be bare.
PythonLiteral read_python_literal(std::string_view text, size_t pos, std::string_view raw_quote = "");

// `text` read whole as one literal (whitespace around it allowed), as JSON;
// empty when it is not one.
std::string python_literal_json(std::string_view text);

}  // namespace kiln::text
