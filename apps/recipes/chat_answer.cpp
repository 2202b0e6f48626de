#include "apps/recipes/chat_answer.h"

#include <memory>

#include "kiln/core/error.h"

namespace kiln::recipes {

const text::ToolCallFormat* constrain_tool_calls(const InferenceModel& model, const nlohmann::ordered_json& tools,
                                                 const text::ToolChoice& choice, bool parallel, CompletionOptions& o) {
  if (choice.mode == text::ToolChoice::Mode::kNone) return nullptr;
  const text::ToolCallFormat* format = model.tool_call_format();
  KILN_CHECK(format, "its chat template spells tool calls in none of the formats Kiln reads (",
             text::tool_call_format_list(), "); tool_choice \"none\" shows it the tools without reading calls");
  o.keep_tool_tokens = true;
  if (o.grammar) {
    KILN_CHECK(choice.mode == text::ToolChoice::Mode::kAuto, "tool_choice required or a named function constrains "
               "the answer to a tool call: it cannot take a grammar or response_format too");
    return format;  // the answer's own constraint applies; calls are read as written
  }
  text::ToolConstraint c = text::tool_call_constraint(*format, tools, choice, parallel);
  o.grammar = std::move(c.grammar);
  o.grammar_triggers = std::move(c.triggers);
  o.grammar_writes_calls = true;
  return format;
}

const text::ToolCallFormat* content_format(const InferenceModel& model) {
  const text::ToolCallFormat* format = model.tool_call_format();
  return format && *format->content_recipient ? format : nullptr;
}

ReasoningStart reason_before_answering(const InferenceModel& model, const std::string& prompt, CompletionOptions& o) {
  // A constrained answer's content names its recipient first, where the model's answers spell content so.
  if (const text::ToolCallFormat* recipient = content_format(model);
      recipient && o.grammar && o.grammar_triggers.empty() && !o.grammar_writes_calls)
    o.grammar = std::make_shared<const text::Grammar>(text::grammar_after_content_recipient(*recipient, *o.grammar));
  const text::ReasoningFormat* format = model.reasoning_format();
  if (!format) return {};
  const ReasoningStart start{format, text::starts_in_reasoning(*format, prompt)};
  o.reasoning = start.format;
  o.reasoning_open = start.open;
  if (o.grammar && o.grammar_triggers.empty() && !text::closes_reasoning(*format, prompt))
    o.grammar = std::make_shared<const text::Grammar>(
        text::grammar_after_reasoning(*format, start.open, *o.grammar, !o.grammar_writes_calls));
  return start;
}

ChatAnswer read_chat_answer(const std::string& text, bool whole, const ReasoningStart& reasoning,
                            const text::ToolCallFormat* tools, const nlohmann::ordered_json& tool_list) {
  ChatAnswer r;
  std::string content = text;
  if (reasoning.format) {
    text::ReasonedAnswer split = text::read_reasoning(*reasoning.format, reasoning.open, text, whole);
    r.reasoning = std::move(split.reasoning);
    content = std::move(split.content);
  }
  if (tools)
    r.answer = text::read_tool_answer(*tools, content, whole, tool_list);
  else
    r.answer.content = std::move(content);
  if (reasoning.format) r.answer.content = std::string(text::answer_text(*reasoning.format, r.answer.content, whole));
  return r;
}

}  // namespace kiln::recipes
