// A chat's answer around what the model writes: the constraints that make
// its tool calls valid and let it reason before a constrained answer, and
// the reading of what it wrote into reasoning, content and tool calls. The
// server, kiln chat and the Python module share them.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "apps/recipes/inference.h"
#include "kiln/text/reasoning.h"
#include "kiln/text/tool_calls.h"

namespace kiln::recipes {

// A chat that may call `tools` (OpenAI's functions; `choice` as the API's
// tool_choice): sets `o` so that the model's tool-call format keeps its
// tokens as text and, unless `o` already holds the answer's own grammar
// (tool_choice auto beside a response_format), constrains the calls to
// valid ones. Returns the format the answer's calls are read in, or null
// for tool_choice none. A model whose template spells calls in no format
// Kiln reads, tools whose parameters the grammar cannot honour, and a
// required or named choice beside another grammar are kiln::Errors.
const text::ToolCallFormat* constrain_tool_calls(const InferenceModel& model, const nlohmann::ordered_json& tools,
                                                 const text::ToolChoice& choice, bool parallel, CompletionOptions& o);

// The format an answer that calls no tools is read in: the model's, where
// its content comes as a recipient's (Functionary 3.2's "all", which is
// not the content's), read with no tools; else null.
const text::ToolCallFormat* content_format(const InferenceModel& model);

// Where a chat answer to `prompt` reasons: in the model's marks (null: its
// template has none), from the first token when the prompt opened them.
struct ReasoningStart {
  const text::ReasoningFormat* format = nullptr;
  bool open = false;
};
// A chat answer to `prompt` that may reason first: sets `o` to look for
// tool calls after the reasoning only, and gives a grammar that holds from
// the first token (a response_format, a forced call) the answer after the
// thinking instead, as vLLM and llama-server do, unless the prompt closed
// the marks already. A response_format's answer names the content's
// recipient first where the model's format has one (Functionary 3.2's).
// Call after constrain_tool_calls.
ReasoningStart reason_before_answering(const InferenceModel& model, const std::string& prompt, CompletionOptions& o);

// A chat answer read so far: the reasoning split off (where the model
// reasons in marks), then its content (up to the template's answer closing:
// ReasoningFormat::answer_closing) and the tool calls in it (where
// `tools`: the format they are read in, and the request's tools, whose
// parameters' types read XML-style values).
struct ChatAnswer {
  std::string reasoning;
  text::ToolAnswer answer;
};
ChatAnswer read_chat_answer(const std::string& text, bool whole, const ReasoningStart& reasoning,
                            const text::ToolCallFormat* tools, const nlohmann::ordered_json& tool_list);

}  // namespace kiln::recipes
