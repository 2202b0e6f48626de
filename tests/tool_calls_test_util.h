// Shared by the tool-call tests: a format by name, and the tools their
// grammars and readers are checked against.
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/text/tool_calls.h"

namespace kiln::text::tool_calls_test {

inline const ToolCallFormat& format_named(const std::string& name) {
  for (const auto& f : tool_call_formats())
    if (name == f.name) return f;
  throw std::runtime_error("no format " + name);
}

inline const nlohmann::ordered_json kTools = nlohmann::ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
   "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
   "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time"}}])");

}  // namespace kiln::text::tool_calls_test
