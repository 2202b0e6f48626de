#include "kiln/text/reasoning.h"

#include <algorithm>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/text/grammar/json_schema.h"
#include "kiln/text/grammar/text_then_mark.h"
#include "kiln/text/spaces.h"

namespace kiln::text {

namespace {

using json = nlohmann::ordered_json;

// name, begin, end (as the real templates render an assistant's reasoning).
const std::vector<ReasoningFormat> kFormats = {
    {"seed-oss", "<seed:think>", "</seed:think>"},
    {"minimax-m3", "<mm:think>", "</mm:think>"},
    {"hunyuan", "<think:opensource>", "</think:opensource>"},
    {"command-r", "<|START_THINKING|>", "<|END_THINKING|>"},
    {"kimi-k3", "<|open|>think<|sep|>", "<|close|>think<|sep|>", "<|open|>response<|sep|>", "<|close|>response<|sep|>"},
    {"gemma-4", "<|channel>thought", "<channel|>"},
    // gpt-oss (harmony): the analysis channel, then a message of its own in the final channel (or a call).
    {"harmony", "<|channel|>analysis<|message|>", "<|end|>", "<|start|>assistant", "", "<|channel|>final<|message|>"},
    // muse-glimmer: a message to itself, then the answer's message to the user (or a call's, to the tool).
    {"muse-glimmer", " to=self<|message|>", "<|eom|>", "<|start|>assistant", "<|eom|>", " to=user<|message|>"},
    // Solar Open: the reasoning is a turn of its own; the answer's turn follows it (its <|content|>, a special
    // token, is not in the answer's text).
    {"solar-open", "<|think|>", "<|end|>", "<|begin|>assistant"},
    // Qwen3, QwQ, DeepSeek R1 and V3.1+, GLM 4.5+, MiniMax M2, Nemotron, SmolLM3, Step 3.5...
    {"think", "<think>", "</think>"},
};

// How many bytes at the end of `s` could begin `mark` (a mark split across tokens).
size_t partial_mark(std::string_view s, std::string_view mark) {
  for (size_t k = std::min(s.size(), mark.size() - 1); k > 0; --k)
    if (s.substr(s.size() - k) == mark.substr(0, k)) return k;
  return 0;
}

// Where the reasoning's text starts in an answer so far: 0 `inside` the
// marks, past the begin mark where the answer opens with it; else none, or
// (not `whole`) not known while the text so far may still open them.
constexpr size_t kNoReasoning = std::string_view::npos, kMayStillOpen = kNoReasoning - 1;
size_t reasoning_start(const ReasoningFormat& format, bool inside, std::string_view text, bool whole) {
  if (inside) return 0;
  const std::string_view begin = unspaced(format.begin);  // whitespace before the mark is skipped
  size_t first = 0;
  while (first < text.size() && is_space(text[first])) ++first;
  const std::string_view opening = text.substr(first);
  if (opening.starts_with(begin)) return first + begin.size();
  return !whole && begin.starts_with(opening) ? kMayStillOpen : kNoReasoning;
}

// Past the answer opening after the end mark at `at` in `text` (whitespace
// before it skipped; `at` itself for a format without one), or npos while
// the text so far may still be it (not `whole`).
size_t past_answer_opening(const ReasoningFormat& format, std::string_view text, size_t at, bool whole) {
  const std::string_view opening = format.answer_opening;
  if (opening.empty()) return at;
  size_t p = at;
  while (p < text.size() && is_space(text[p])) ++p;
  if (text.substr(p).starts_with(opening)) return p + opening.size();
  return !whole && opening.starts_with(text.substr(p)) ? std::string_view::npos : at;
}

}  // namespace

const std::vector<ReasoningFormat>& reasoning_formats() { return kFormats; }

const ReasoningFormat* detect_reasoning_format(const ChatTemplate& chat) {
  if (!chat.is_jinja()) return nullptr;
  constexpr std::string_view kThought = "Thinking it over.";
  const json user = {{"role", "user"}, {"content", "What is two and two?"}};
  // Under vLLM's name too (Solar Open's, Laguna's, Hy3's templates read it; ChatTemplate::render_json gives
  // reasoning_content as thinking, as transformers does, but not as reasoning).
  const json with_reasoning = json::array(
      {user, {{"role", "assistant"}, {"reasoning_content", kThought}, {"reasoning", kThought}, {"content", "Four."}}});
  try {
    const std::string rendered = chat.render_json(with_reasoning, json(), false);
    for (size_t at = rendered.find(kThought); at != std::string::npos; at = rendered.find(kThought, at + 1)) {
      const std::string_view before = trimmed(std::string_view(rendered).substr(0, at));
      const std::string_view after = trimmed(std::string_view(rendered).substr(at + kThought.size()));
      for (const auto& f : kFormats)
        if (before.ends_with(f.begin) && after.starts_with(f.end)) return &f;
    }
    // Templates that drop past reasoning (DeepSeek R1's) may still open it in the generation prompt.
    const std::string without = chat.render_json(json::array({user}), json(), false);
    const std::string prompt = chat.render_json(json::array({user}), json(), true);
    const std::string_view opening =
        prompt.starts_with(without) ? std::string_view(prompt).substr(without.size()) : std::string_view(prompt);
    for (const auto& f : kFormats)
      if (opening.find(f.begin) != std::string_view::npos) return &f;
  } catch (const Error&) {
    // a template that refuses these messages writes no reasoning Kiln reads
  }
  return nullptr;
}

bool starts_in_reasoning(const ReasoningFormat& format, std::string_view prompt) {
  const size_t begin = prompt.rfind(format.begin), end = prompt.rfind(format.end);
  return begin != std::string_view::npos && (end == std::string_view::npos || end < begin);
}

bool closes_reasoning(const ReasoningFormat& format, std::string_view prompt) {
  if (!*format.answer_opening) return trimmed(prompt).ends_with(format.end);
  return trimmed(prompt).ends_with(std::string(format.begin) + format.end + format.answer_opening);
}

ReasonedAnswer read_reasoning(const ReasoningFormat& format, bool inside, std::string_view text, bool whole) {
  ReasonedAnswer out;
  const std::string_view end = format.end;
  const size_t start = reasoning_start(format, inside, text, whole);
  if (start == kMayStillOpen) return out;
  if (start == kNoReasoning) {
    out.content = text;
    return out;
  }
  const std::string_view rest = text.substr(start);
  const size_t closed = rest.find(end);
  if (closed == std::string_view::npos) {
    out.reasoning = trimmed(whole ? rest : rest.substr(0, rest.size() - partial_mark(rest, end)));
    return out;
  }
  out.reasoning = trimmed(rest.substr(0, closed));
  const size_t answer = past_answer_opening(format, rest, closed + end.size(), whole);
  if (answer == std::string_view::npos) return out;
  std::string_view after = rest.substr(answer);
  while (!after.empty() && is_space(after.front())) after.remove_prefix(1);
  out.content = after;
  return out;
}

std::string_view answer_text(const ReasoningFormat& format, std::string_view content, bool whole) {
  const std::string_view opening = unspaced(format.content_opening), closing = format.answer_closing;
  if (!opening.empty()) {
    if (content.starts_with(opening))
      content.remove_prefix(opening.size());
    else if (!whole && opening.starts_with(content))
      return {};
  }
  if (closing.empty()) return content;
  if (const size_t at = content.find(closing); at != std::string_view::npos) return content.substr(0, at);
  return whole ? content : content.substr(0, content.size() - partial_mark(content, closing));
}

size_t answer_start(const ReasoningFormat& format, bool inside, std::string_view text) {
  const size_t start = reasoning_start(format, inside, text, false);
  if (start == kNoReasoning) return 0;
  if (start == kMayStillOpen) return std::string_view::npos;
  const size_t closed = text.find(format.end, start);
  return closed == std::string_view::npos ? closed
                                          : past_answer_opening(format, text, closed + std::strlen(format.end), false);
}

Grammar grammar_after_reasoning(const ReasoningFormat& format, bool inside, const Grammar& answer, bool content) {
  const std::string name = unused_rule_prefix(answer, "reasoning");
  // The thinking, its end mark, and the answer's opening where the template writes one after it (an answer
  // that does not reason is already opened by the prompt).
  const std::string thinking =
      name + "-text-0 " + name + "-space" + (*format.answer_opening ? " " + gbnf_literal(format.answer_opening) : "");
  const std::string before = inside ? thinking : "( " + gbnf_literal(format.begin) + " " + thinking + " )?";
  const std::string opening = content && *format.content_opening ? gbnf_literal(format.content_opening) + " " : "";
  const std::string rules = name + "-answer ::= " + before + " " + opening + answer.rules[size_t(answer.root)].name +
                            "\n" + name + "-space ::= [ \\t\\r\\n]{0,4}\n" +
                            text_then_mark_gbnf(name + "-text", format.end);
  return parse_gbnf(answer.source + "\n" + rules, name + "-answer");
}

}  // namespace kiln::text
