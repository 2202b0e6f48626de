#include "apps/serve/responses_requests.h"

#include <utility>

#include "apps/serve/request_fields.h"

namespace kiln::serve {
namespace {

using json = nlohmann::ordered_json;

// A message's content: a string, or text parts (input_text, and output_text from an earlier answer).
std::string content_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw HttpError(400, where + ".content must be a string or an array of text parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string type = part.is_object() ? part.value("type", "") : "";
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    if (type == "input_image" || type == "input_file" || type == "input_audio")
      throw HttpError(400, at + " is an " + type + ": Kiln serves text models");
    if (type != "input_text" && type != "output_text" && type != "text")
      throw HttpError(400, at + ": Kiln reads text parts (input_text, output_text), not '" + type + "'");
    if (!part.contains("text") || !part["text"].is_string()) throw HttpError(400, at + ".text must be a string");
    text += part["text"].get<std::string>();
  }
  return text;
}

// The input items -> OpenAI chat messages: consecutive function_call items (and the reasoning before them) make one
// assistant turn, or join the assistant message just before; a function_call_output is a tool message.
json chat_messages(const json& input) {
  if (input.is_string()) return json::array({{{"role", "user"}, {"content", input}}});
  if (!input.is_array() || input.empty())
    throw HttpError(400, "'input' must be a string or a non-empty array of items");
  json messages = json::array();
  std::string reasoning;  // a reasoning item's text, for the assistant turn after it
  auto assistant_turn = [&]() -> json& {
    if (messages.empty() || messages.back()["role"] != "assistant" || !reasoning.empty())
      messages.push_back({{"role", "assistant"}, {"content", ""}});
    if (!reasoning.empty()) messages.back()["reasoning_content"] = std::exchange(reasoning, "");
    return messages.back();
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) throw HttpError(400, where + " is not an object");
    const std::string type = item.value("type", item.contains("role") ? "message" : "");
    if (type == "message") {
      only(item, {"type", "role", "content", "id", "status"}, "/v1/responses");
      std::string role = item.value("role", "");
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system")
        throw HttpError(400, where + ".role must be user, assistant, system or developer");
      if (!item.contains("content")) throw HttpError(400, where + " has no 'content'");
      const std::string text = content_text(item["content"], where);
      if (role == "assistant") {
        json& turn = assistant_turn();
        turn["content"] = turn["content"].get<std::string>() + text;
      } else {
        messages.push_back({{"role", role}, {"content", text}});
      }
    } else if (type == "function_call") {
      only(item, {"type", "call_id", "name", "arguments", "id", "status"}, "/v1/responses");
      json& turn = assistant_turn();
      if (!turn.contains("tool_calls")) turn["tool_calls"] = json::array();
      turn["tool_calls"].push_back(
          {{"id", string_at(item, "call_id", where)},
           {"type", "function"},
           {"function",
            {{"name", string_at(item, "name", where)}, {"arguments", string_at(item, "arguments", where)}}}});
    } else if (type == "function_call_output") {
      only(item, {"type", "call_id", "output", "id", "status"}, "/v1/responses");
      if (!item.contains("output")) throw HttpError(400, where + " has no 'output'");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", string_at(item, "call_id", where)},
                          {"content", item["output"].is_string() ? item["output"].get<std::string>()
                                                                 : content_text(item["output"], where + ".output")}});
    } else if (type == "reasoning") {
      only(item, {"type", "id", "summary", "content", "encrypted_content", "status"}, "/v1/responses");
      std::string text;
      for (const json& part : item.value("content", json::array()))
        if (part.is_object() && part.value("type", "") == "reasoning_text" && part.value("text", json()).is_string())
          text += part["text"].get<std::string>();
      // Kiln's encrypted_content is the reasoning's text as it is (no key to hide it from a local model):
      // a client that keeps only that (Codex, storing nothing) gives the reasoning back through it.
      if (text.empty() && item.value("encrypted_content", json()).is_string()) text = item["encrypted_content"];
      reasoning += text;
    } else {
      throw HttpError(
          400,
          where + ": Kiln takes message, function_call, function_call_output and reasoning items, not '" + type + "'");
    }
  }
  return messages;
}

// The Responses API's own tools: {"type": "function", "name", "description", "parameters", "strict"}.
const FlatTools kFunctionTools = {.own_type = "function",
                                  .default_type = "",
                                  .schema = "parameters",
                                  .fields = {"type", "name", "description", "parameters", "strict"},
                                  .endpoint = "/v1/responses",
                                  .spelled = "{\"type\": \"function\", \"name\", \"parameters\"}"};

}  // namespace

ChatRequest parse_openai_responses(const std::string& text) {
  const json body = object_of(text);
  // clang-format off
  only(body,
       {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream", "tools",
        "tool_choice", "parallel_tool_calls", "text", "reasoning", "store", "metadata", "user", "safety_identifier",
        "prompt_cache_key", "truncation", "previous_response_id", "include", "background", "service_tier"},
       "/v1/responses");
  // clang-format on
  if (body.contains("previous_response_id"))
    throw HttpError(400, "previous_response_id: Kiln keeps no responses; send the whole conversation as 'input'");
  if (body.value("background", false) != false) throw HttpError(400, "background: Kiln answers in the request");
  if (body.value("truncation", "disabled") != "disabled")
    throw HttpError(400, "truncation must be \"disabled\": a prompt past the context is an error, not cut");
  const json include = body.value("include", json::array());
  if (!include.is_array()) throw HttpError(400, "'include' must be an array");
  for (const json& what : include)  // (reasoning items always carry encrypted_content)
    if (what != "reasoning.encrypted_content")
      throw HttpError(400, "include: Kiln adds reasoning.encrypted_content only, not " + what.dump());
  json out = {{"model", body.value("model", json())}};
  json messages = chat_messages(body.value("input", json()));
  if (body.contains("instructions")) {
    if (!body["instructions"].is_string()) throw HttpError(400, "'instructions' must be a string");
    messages.insert(messages.begin(), json{{"role", "system"}, {"content", body["instructions"]}});
  }
  out["messages"] = std::move(messages);
  if (body.contains("max_output_tokens")) {
    const json& n = body["max_output_tokens"];
    if (!n.is_number_integer() || n.get<int64_t>() < 1)
      throw HttpError(400, "'max_output_tokens' must be a positive integer");
    out["max_tokens"] = std::min<int64_t>(n.get<int64_t>(), 4096);
  } else {
    out["max_tokens"] = 4096;  // until the answer ends, as OpenAI's (up to Kiln's bound on one)
  }
  for (const char* key : {"temperature", "top_p", "stream", "tool_choice", "parallel_tool_calls"})
    if (body.contains(key)) out[key] = body[key];
  if (out.contains("tool_choice") && out["tool_choice"].is_object()) {  // {"type": "function", "name"}
    const json& choice = out["tool_choice"];
    if (choice.value("type", "") != "function" || !choice.value("name", json()).is_string())
      throw HttpError(400, "tool_choice must be none, auto, required or {\"type\": \"function\", \"name\"}");
    out["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
  }
  if (body.contains("tools")) out["tools"] = chat_tools_of(body["tools"], kFunctionTools);
  if (body.contains("text")) {  // the answer's format: text, json_object, or json_schema {"name", "schema", "strict"}
    const json& text_config = body["text"];
    if (!text_config.is_object()) throw HttpError(400, "'text' must be an object");
    only(text_config, {"format", "verbosity"}, "/v1/responses");
    const json format = text_config.value("format", json{{"type", "text"}});
    const std::string type = format.is_object() ? format.value("type", "") : "";
    if (type == "json_object") {
      out["response_format"] = {{"type", "json_object"}};
    } else if (type == "json_schema") {
      json schema = {{"name", format.value("name", "output")}, {"schema", format.value("schema", json::object())}};
      if (format.contains("strict")) schema["strict"] = format["strict"];
      out["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
    } else if (type != "text") {
      throw HttpError(400, "text.format.type must be text, json_object or json_schema");
    }
  }
  return parse_chat(out.dump());
}

}  // namespace kiln::serve
