// Anthropic's Messages API answers (anthropic_requests.h): the whole
// message, or its server-sent events, content block by content block.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "apps/recipes/inference.h"
#include "apps/serve/part_stream.h"
#include "kiln/text/tool_calls.h"

namespace kiln::serve {

// A call as a tool_use block: {"type": "tool_use", "id", "name", "input"} (the arguments as an object; JSON text
// that is not one, a call cut short, goes as {"_unparsed": the text}: shown, not lost).
nlohmann::json tool_use_block(const std::string& id, const text::ToolCall& call);

// The message: its thinking, text and tool_use blocks, stop_reason ("end_turn", "stop_sequence" with the
// stop_sequence, "max_tokens", or "tool_use" for an answer that ended after calling), and usage
// (input_tokens: the prompt's tokens the prefix cache did not give; cache_read_input_tokens: those it did).
nlohmann::json anthropic_message(const std::string& id, const std::string& model, const std::string& reasoning,
                                 const std::string& content, const nlohmann::json& tool_uses,
                                 const recipes::Completion& c);
std::string anthropic_stop_reason(const recipes::Completion& c, bool called);
nlohmann::json anthropic_usage(const recipes::Completion& c);

// A streamed message's content blocks: each piece opens its kind's block where the open one is of another kind
// (closing that), so blocks come one after another, indexed from 0, as Anthropic streams them; message_start
// first, message_delta (stop_reason, usage) and message_stop last.
class AnthropicBlocks final : public PartStream {
 public:
  AnthropicBlocks(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}
  std::vector<nlohmann::json> start() override;
  std::vector<nlohmann::json> reasoning(const std::string& piece) override { return add("thinking", piece, {}); }
  std::vector<nlohmann::json> text(const std::string& piece) override { return add("text", piece, {}); }
  std::vector<nlohmann::json> call(size_t index, const std::string& id, const std::string& name,
                                   const std::string& arguments, bool opening) override;
  std::vector<nlohmann::json> finish(const recipes::Completion& c, bool called) override;
  nlohmann::json error(const std::string& message) override;

 private:
  std::vector<nlohmann::json> add(const std::string& kind, const std::string& piece, const nlohmann::json& block);
  // The open block's stop (a thinking block's signature first).
  void close(std::vector<nlohmann::json>& events);
  std::string id_, model_;
  std::string open_kind_;  // "": none open
  size_t open_call_ = 0;   // a tool_use block's call
  int64_t index_ = -1;     // the open (or last) block's
};

}  // namespace kiln::serve
