#include "apps/serve/anthropic_answers.h"

namespace kiln::serve {

using nlohmann::json;

json tool_use_block(const std::string& id, const text::ToolCall& call) {
  json input = json::parse(call.arguments, nullptr, false);
  if (input.is_discarded() || !input.is_object()) input = {{"_unparsed", call.arguments}};
  return {{"type", "tool_use"}, {"id", id}, {"name", call.name}, {"input", std::move(input)}};
}

std::string anthropic_stop_reason(const recipes::Completion& c, bool called) {
  if (c.finish_reason == "length") return "max_tokens";
  if (called) return "tool_use";
  return c.stop_string.empty() ? "end_turn" : "stop_sequence";
}

json anthropic_usage(const recipes::Completion& c) {
  return {{"input_tokens", c.prompt_tokens - c.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", c.cached_tokens},
          {"output_tokens", c.completion_tokens}};
}

json anthropic_message(const std::string& id, const std::string& model, const std::string& reasoning,
                       const std::string& content, const json& tool_uses, const recipes::Completion& c) {
  json blocks = json::array();
  if (!reasoning.empty()) blocks.push_back({{"type", "thinking"}, {"thinking", reasoning}, {"signature", ""}});
  if (!content.empty() || (reasoning.empty() && tool_uses.empty()))
    blocks.push_back({{"type", "text"}, {"text", content}});
  for (const json& use : tool_uses) blocks.push_back(use);
  const std::string stop = anthropic_stop_reason(c, !tool_uses.empty());
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", std::move(blocks)},
          {"stop_reason", stop},
          {"stop_sequence", stop == "stop_sequence" ? json(c.stop_string) : json()},
          {"usage", anthropic_usage(c)}};
}

std::vector<json> AnthropicBlocks::start() {
  // No content yet, no stop_reason; usage 0: message_delta carries it at the end, once the prompt is read.
  return {{{"type", "message_start"},
           {"message",
            {{"id", id_},
             {"type", "message"},
             {"role", "assistant"},
             {"model", model_},
             {"content", json::array()},
             {"stop_reason", nullptr},
             {"stop_sequence", nullptr},
             {"usage", anthropic_usage({})}}}}};
}

json AnthropicBlocks::error(const std::string& message) {
  return {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", message}}}};
}

void AnthropicBlocks::close(std::vector<json>& events) {
  if (open_kind_ == "thinking")  // Anthropic's streams sign a thinking block before it stops: unsigned here
    events.push_back({{"type", "content_block_delta"},
                      {"index", index_},
                      {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  if (!open_kind_.empty()) events.push_back({{"type", "content_block_stop"}, {"index", index_}});
  open_kind_.clear();
}

std::vector<json> AnthropicBlocks::add(const std::string& kind, const std::string& piece, const json& block) {
  std::vector<json> events;
  if (kind != open_kind_ || !block.empty()) {  // a new block (a new call opens one even after another call)
    close(events);
    open_kind_ = kind;
    json start = block.empty() ? json{{"type", kind}, {kind, ""}} : block;
    if (kind == "thinking") start["signature"] = "";
    events.push_back({{"type", "content_block_start"}, {"index", ++index_}, {"content_block", std::move(start)}});
  }
  if (piece.empty()) return events;
  json delta = kind == "thinking" ? json{{"type", "thinking_delta"}, {"thinking", piece}}
               : kind == "text"   ? json{{"type", "text_delta"}, {"text", piece}}
                                  : json{{"type", "input_json_delta"}, {"partial_json", piece}};
  events.push_back({{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}});
  return events;
}

std::vector<json> AnthropicBlocks::call(size_t index, const std::string& id, const std::string& name,
                                        const std::string& arguments, bool opening) {
  if (!opening && !(open_kind_ == "tool_use" && open_call_ == index)) return {};  // (a closed call's: none come)
  open_call_ = index;
  return add("tool_use", arguments,
             opening ? json{{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", json::object()}} : json());
}

std::vector<json> AnthropicBlocks::finish(const recipes::Completion& c, bool called) {
  std::vector<json> events;
  close(events);
  const std::string stop = anthropic_stop_reason(c, called);
  events.push_back(
      {{"type", "message_delta"},
       {"delta", {{"stop_reason", stop}, {"stop_sequence", stop == "stop_sequence" ? json(c.stop_string) : json()}}},
       {"usage", anthropic_usage(c)}});
  events.push_back({{"type", "message_stop"}});
  return events;
}

}  // namespace kiln::serve
