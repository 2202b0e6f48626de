// Tool-call arguments as nested elements (ToolCallFormat::element_prefix:
// MiniMax M3): each argument PREFIX<KEY>VALUE PREFIX</KEY>, an object's
// VALUE its members as elements, an array's its items as PREFIX<item>
// elements, a string's its raw text and any other's its JSON, as the
// template's to_xml macro writes them. Read by the parameters' schema into
// the JSON object OpenAI's `arguments` carry, and compiled from it into the
// grammar of a forced call.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kiln::text {

struct ElementsRead {
  enum class Scan { kDone, kPartial, kBad } scan;
  size_t end = 0;      // where the members end (kDone): at `close`
  std::string json{};  // the object so far: each member once whole, the closing brace once done
};

// The members of an object with schema `parameters`, as elements from `pos`
// in `text` up to `close` (not included).
ElementsRead read_elements(std::string_view text, size_t pos, std::string_view prefix,
                           const nlohmann::ordered_json& parameters, std::string_view close);

// GBNF for those members, in the schema's order (required ones always,
// optional ones at most once); text values hold no "]<]" (so none can run
// into a closing tag of MiniMax M3's prefix), others are their schema's
// JSON. Rules are added to `rules` under names starting with `name`.
std::string elements_gbnf(std::string_view prefix, const nlohmann::ordered_json& parameters, const std::string& name,
                          std::string& rules);

}  // namespace kiln::text
