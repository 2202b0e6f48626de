#include "kiln/text/tool_call_probe.h"

#include <ctime>

#include "kiln/core/error.h"
#include "kiln/text/jinja/template.h"
#include "kiln/text/jinja/value.h"
#include "kiln/text/tool_calls.h"

namespace kiln::text {

using json = nlohmann::ordered_json;

json tool_call_probe_messages(bool text) {
  json messages = json::parse(R"([{"role": "user", "content": "What's the weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "call00001",
       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}])");
  if (text) messages[1]["tool_calls"][0]["function"]["arguments"] = "{\"city\": \"Paris\"}";
  return messages;
}

const json& tool_call_probe_tools() {
  static const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Get the current weather in a city.", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  return tools;
}

std::optional<std::string> rendered_tool_call_probe(const ChatTemplate& chat, const json& messages, bool prompt) {
  try {
    return chat.render_json(messages, tool_call_probe_tools(), prompt,
                            serving_variables(chat, tool_call_probe_tools()));
  } catch (const Error&) {
    return std::nullopt;
  }
}

bool takes_text_arguments(const ChatTemplate& chat) {
  return chat.is_jinja() && !rendered_tool_call_probe(chat, tool_call_probe_messages(false), false) &&
         rendered_tool_call_probe(chat, tool_call_probe_messages(true), false);
}

json arguments_as_taken(const json& messages, bool text) {
  json out = messages;
  for (json& m : out) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (json& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
          !call["function"].contains("arguments"))
        continue;
      json& arguments = call["function"]["arguments"];
      if (text && arguments.is_object()) {
        arguments = jinja::to_json(jinja::from_json(arguments));
      } else if (!text && arguments.is_string()) {
        json parsed = json::parse(arguments.get<std::string>(), nullptr, false);
        if (!parsed.is_discarded() && parsed.is_object()) arguments = std::move(parsed);
      }
    }
  }
  return out;
}

json serving_variables(const ChatTemplate& chat, const json& tools) {
  const std::time_t now = chat.now_unix_seconds ? std::time_t(*chat.now_unix_seconds) : std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char today[32];
  std::strftime(today, sizeof today, "%b %d %Y", &tm);
  jinja::JsonStyle indented;
  indented.indent = 4;
  return {{"functions", jinja::to_json(jinja::from_json(tools.is_array() ? tools : json::array()), indented)},
          {"datetime", today}};
}

}  // namespace kiln::text
