// Reasoning in a model's output: the chain of thought a reasoning model
// (Qwen3, DeepSeek R1, GLM 4.6, Seed-OSS...) writes between two marks
// before its answer. A chat answer splits it off into the API's
// message.reasoning_content, as llama-server and vLLM's reasoning parsers
// do; the marks a template uses are found by rendering a message with
// reasoning through it, not by recognising the template.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "kiln/text/chat_template.h"

namespace kiln::text {

struct ReasoningFormat {
  const char* name;
  const char* begin;
  const char* end;
};

// The known marks, most specific first.
const std::vector<ReasoningFormat>& reasoning_formats();

// The marks `chat` puts around an assistant message's reasoning_content, or
// (for templates that drop past reasoning, DeepSeek R1's) that its
// generation prompt opens; null when neither.
const ReasoningFormat* detect_reasoning_format(const ChatTemplate& chat);

// Whether an answer to `prompt` starts inside its reasoning: the prompt
// opens the marks without closing them (DeepSeek R1's generation prompt
// ends with "<think>\n"; Qwen3's with enable_thinking false closes them).
bool starts_in_reasoning(const ReasoningFormat& format, std::string_view prompt);

// An answer read so far: its reasoning and the content after it, each with
// the whitespace around it trimmed.
struct ReasonedAnswer {
  std::string reasoning;
  std::string content;
};

// Reads `text`, an answer so far (`whole`: all of it), which starts inside
// the reasoning when `inside`, else has reasoning only where it opens with
// the begin mark. Reading a longer text of the same answer only extends
// both parts: what may still become a mark, or whitespace that may end the
// reasoning, is held back until it is known. Reasoning never closed is all
// reasoning (an answer cut off by max_tokens while thinking).
ReasonedAnswer read_reasoning(const ReasoningFormat& format, bool inside, std::string_view text, bool whole);

}  // namespace kiln::text
