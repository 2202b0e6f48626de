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
#include "kiln/text/grammar/gbnf.h"

namespace kiln::text {

struct ReasoningFormat {
  const char* name;
  const char* begin;
  const char* end;
  // What the template writes after the end mark to open the answer, which
  // is not the answer's (Solar Open's reasoning is a turn of its own: the
  // answer's turn opens with "<|begin|>assistant").
  const char* answer_opening = "";
  // What the template writes after the answer's text (Kimi K3's
  // "<|close|>response<|sep|>", before its tool calls), which is not the
  // answer's either.
  const char* answer_closing = "";
  // What opens the answer's text itself, with or without reasoning before
  // it (gpt-oss's final channel, "<|channel|>final<|message|>"), which a
  // tool call's text does not have.
  const char* content_opening = "";
  // The marks and what the template writes around the answer.
  std::vector<std::string> literals() const { return {begin, end, answer_opening, answer_closing, content_opening}; }
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

// Whether `prompt` closes the marks for the answer itself: it ends with the
// end mark (Qwen3's with enable_thinking false, DeepSeek V4's chat mode), so
// the answer reasons no further. Where an answer opening follows the end
// mark, which every turn's end then looks like, the prompt must end with
// empty marks and the opening (Solar Open's reasoning_effort low).
bool closes_reasoning(const ReasoningFormat& format, std::string_view prompt);

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

// The answer's text in `content` (what follows the reasoning, or its tool
// calls' content): after the format's content opening, up to its answer
// closing, less what may still be either (not `whole`).
std::string_view answer_text(const ReasoningFormat& format, std::string_view content, bool whole);

// Where the answer after the reasoning starts in `text` (an answer so far,
// as read_reasoning reads it): 0 when it does not open with the marks,
// past the end mark once they close, npos while it is (or may still begin)
// reasoning.
size_t answer_start(const ReasoningFormat& format, bool inside, std::string_view text);

// `answer` (a response_format's grammar, `content`, which the format's
// content opening precedes; or a forced tool call's) with the reasoning
// before it: free text inside the marks, then the answer, as vLLM
// and llama-server order a reasoning model's constrained answer (the
// grammar takes the answer, not the thinking). `inside`: the prompt opened
// the marks, so the answer closes them first; else it may open them. The
// text between the marks is any text in which the end mark does not occur.
Grammar grammar_after_reasoning(const ReasoningFormat& format, bool inside, const Grammar& answer, bool content);

}  // namespace kiln::text
