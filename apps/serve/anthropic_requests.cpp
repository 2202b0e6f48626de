#include "apps/serve/anthropic_requests.h"

#include <random>

#include "apps/serve/request_fields.h"

namespace kiln::serve {
namespace {

using json = nlohmann::ordered_json;

// A text block's text ({"type": "text", "text"}, with the marks Kiln takes and ignores).
std::string text_of(const json& block, const std::string& where) {
  only(block, {"type", "text", "cache_control", "citations"}, "/v1/messages");
  return string_at(block, "text", where).get<std::string>();
}

// A system prompt: a string, or text blocks, joined as llama-server joins them.
std::string system_text(const json& system) {
  if (system.is_string()) return system.get<std::string>();
  if (!system.is_array()) throw HttpError(400, "'system' must be a string or an array of text blocks");
  std::string text;
  for (size_t i = 0; i < system.size(); ++i) {
    const std::string where = "system[" + std::to_string(i) + "]";
    if (!system[i].is_object() || system[i].value("type", json()) != "text")
      throw HttpError(400, where + " must be a text block");
    text += text_of(system[i], where);
  }
  return text;
}

// A tool_result's content: a string, or text blocks.
std::string result_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw HttpError(400, where + ".content must be a string or text blocks");
  std::string text;
  for (const json& block : content) {
    if (!block.is_object() || block.value("type", json()) != "text")
      throw HttpError(400, where + ".content: Kiln serves text models, so a tool result holds text blocks only");
    text += text_of(block, where);
  }
  return text;
}

// One Anthropic message -> its OpenAI messages: a user turn's tool results first (as tool messages answering the
// calls before it), then its text; an assistant turn's text, thinking and tool calls as one message.
void add_message(const json& message, size_t index, json& out) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  if (!message.is_object()) throw HttpError(400, where + " is not an object");
  only(message, {"role", "content"}, "/v1/messages");
  const std::string role = message.value("role", "");
  if (role != "user" && role != "assistant")
    throw HttpError(400, where + ".role must be \"user\" or \"assistant\" (the system prompt is the 'system' field)");
  if (!message.contains("content")) throw HttpError(400, where + " has no 'content'");
  const json& content = message["content"];
  if (content.is_string()) return out.push_back({{"role", role}, {"content", content}});
  if (!content.is_array()) throw HttpError(400, where + ".content must be a string or an array of blocks");
  std::string text, reasoning;
  json calls = json::array(), results = json::array();
  for (size_t b = 0; b < content.size(); ++b) {
    const json& block = content[b];
    const std::string at = where + ".content[" + std::to_string(b) + "]";
    const std::string type = block.is_object() ? block.value("type", "") : "";
    if (type == "text") {
      text += text_of(block, at);
    } else if (type == "tool_use" && role == "assistant") {
      only(block, {"type", "id", "name", "input", "cache_control"}, "/v1/messages");
      if (!block.contains("input") || !block["input"].is_object())
        throw HttpError(400, at + ".input must be an object");
      calls.push_back({{"id", string_at(block, "id", at)},
                       {"type", "function"},
                       {"function", {{"name", string_at(block, "name", at)}, {"arguments", block["input"]}}}});
    } else if (type == "tool_result" && role == "user") {
      only(block, {"type", "tool_use_id", "content", "is_error", "cache_control"}, "/v1/messages");
      results.push_back({{"role", "tool"},
                         {"tool_call_id", string_at(block, "tool_use_id", at)},
                         {"content", block.contains("content") ? result_text(block["content"], at) : ""}});
    } else if (type == "thinking" && role == "assistant") {
      only(block, {"type", "thinking", "signature"}, "/v1/messages");
      reasoning += string_at(block, "thinking", at).get<std::string>();
    } else if (type == "redacted_thinking" && role == "assistant") {
      continue;  // encrypted for Anthropic's models: nothing a local model can read
    } else if (type == "image" || type == "document") {
      throw HttpError(400, at + " is an " + type + ": Kiln serves text models");
    } else {
      throw HttpError(400, at + ": a " + role + " turn takes no block of type '" + type + "'");
    }
  }
  for (json& result : results) out.push_back(std::move(result));
  if (text.empty() && calls.empty() && reasoning.empty() && (role == "user" ? !results.empty() : !content.empty()))
    return;
  json turn = {{"role", role}, {"content", text}};
  if (!calls.empty()) turn["tool_calls"] = std::move(calls);
  if (!reasoning.empty()) turn["reasoning_content"] = std::move(reasoning);
  out.push_back(std::move(turn));
}

// Anthropic's own tools: {"name", "description", "input_schema"}, typed "custom" or not at all.
const FlatTools kAnthropicTools = {.own_type = "custom",
                                   .default_type = "custom",
                                   .schema = "input_schema",
                                   .fields = {"type", "name", "description", "input_schema", "cache_control"},
                                   .endpoint = "/v1/messages",
                                   .spelled = "{\"name\", \"input_schema\"}"};

// tool_choice -> OpenAI's tool_choice and parallel_tool_calls.
void add_tool_choice(const json& choice, json& out) {
  if (!choice.is_object()) throw HttpError(400, "'tool_choice' must be an object with a 'type'");
  only(choice, {"type", "name", "disable_parallel_tool_use"}, "/v1/messages");
  const std::string type = choice.value("type", "");
  if (type == "auto" || type == "none")
    out["tool_choice"] = type;
  else if (type == "any")
    out["tool_choice"] = "required";
  else if (type == "tool")
    out["tool_choice"] = {{"type", "function"}, {"function", {{"name", string_at(choice, "name", "tool_choice")}}}};
  else
    throw HttpError(400, "tool_choice.type must be auto, any, tool or none");
  if (choice.contains("disable_parallel_tool_use")) {
    if (!choice["disable_parallel_tool_use"].is_boolean())
      throw HttpError(400, "tool_choice.disable_parallel_tool_use must be true or false");
    if (type != "none") out["parallel_tool_calls"] = !choice["disable_parallel_tool_use"].get<bool>();
  }
}

}  // namespace

ChatRequest parse_anthropic_messages(const std::string& text, bool counting) {
  const json body = object_of(text);
  // (metadata, service_tier, speed, inference_geo and a request-wide cache_control change no answer here)
  if (counting)
    only(body, {"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config", "cache_control"},
         "/v1/messages/count_tokens");
  else
    only(body,
         {"model", "max_tokens", "messages", "system", "stop_sequences", "stream", "temperature", "top_p", "top_k",
          "tools", "tool_choice", "thinking", "output_config", "metadata", "service_tier", "speed", "inference_geo",
          "cache_control"},
         "/v1/messages");
  json out = {{"model", body.value("model", json())}};
  if (!counting) {
    const json max_tokens = body.value("max_tokens", json());
    if (!max_tokens.is_number_integer() || max_tokens.get<int64_t>() < 1)
      throw HttpError(400, "'max_tokens' must be a positive integer (the Messages API requires it)");
    out["max_tokens"] = std::min<int64_t>(max_tokens.get<int64_t>(), 4096);
    for (const char* key : {"stream", "temperature", "top_p", "top_k"})
      if (body.contains(key)) out[key] = body[key];
    if (body.contains("stop_sequences")) out["stop"] = body["stop_sequences"];
    if (body.contains("metadata") && !body["metadata"].is_object())
      throw HttpError(400, "'metadata' must be an object");
    // No seed in this API: each answer draws its own, as Anthropic's differ from call to call.
    out["seed"] = uint64_t(std::random_device{}()) << 32 | std::random_device{}();
  }
  json messages = json::array();
  if (body.contains("system")) messages.push_back({{"role", "system"}, {"content", system_text(body["system"])}});
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    throw HttpError(400, "'messages' must be a non-empty array of {\"role\", \"content\"} turns");
  for (size_t i = 0; i < body["messages"].size(); ++i) add_message(body["messages"][i], i, messages);
  out["messages"] = std::move(messages);
  if (body.contains("tools")) out["tools"] = chat_tools_of(body["tools"], kAnthropicTools);
  if (body.contains("tool_choice")) add_tool_choice(body["tool_choice"], out);
  if (body.contains("thinking")) {  // enabled or disabled: the template's enable_thinking; adaptive: its default
    const json& thinking = body["thinking"];
    const std::string type = thinking.is_object() ? thinking.value("type", "") : "";
    if (type != "enabled" && type != "disabled" && type != "adaptive" && type != "between_tools")
      throw HttpError(400, "thinking.type must be enabled, disabled, adaptive or between_tools");
    if (type == "enabled" || type == "disabled") out["chat_template_kwargs"] = {{"enable_thinking", type == "enabled"}};
  }
  if (body.contains("output_config")) {  // format: structured output, as response_format's json_schema
    const json& config = body["output_config"];
    if (!config.is_object()) throw HttpError(400, "'output_config' must be an object");
    only(config, {"format", "effort"}, "/v1/messages");
    if (config.contains("format") && !config["format"].is_null()) {
      const json& format = config["format"];
      if (!format.is_object() || format.value("type", "") != "json_schema" || !format.contains("schema"))
        throw HttpError(400, "output_config.format must be {\"type\": \"json_schema\", \"schema\"}");
      out["response_format"] = {{"type", "json_schema"},
                                {"json_schema", {{"name", "output"}, {"schema", format["schema"]}}}};
    }
  }
  return parse_chat(out.dump());
}

}  // namespace kiln::serve
