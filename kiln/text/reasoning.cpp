#include "kiln/text/reasoning.h"

#include <algorithm>

#include "kiln/core/error.h"

namespace kiln::text {

namespace {

using json = nlohmann::ordered_json;

// name, begin, end (as the real templates render an assistant's reasoning).
const std::vector<ReasoningFormat> kFormats = {
    {"seed-oss", "<seed:think>", "</seed:think>"},
    {"minimax-m3", "<mm:think>", "</mm:think>"},
    {"hunyuan", "<think:opensource>", "</think:opensource>"},
    {"command-r", "<|START_THINKING|>", "<|END_THINKING|>"},
    {"kimi-k3", "<|open|>think<|sep|>", "<|close|>think<|sep|>"},
    {"gemma-4", "<|channel>thought", "<channel|>"},
    // Qwen3, QwQ, DeepSeek R1 and V3.1+, GLM 4.5+, MiniMax M2, Nemotron, SmolLM3, Step 3.5...
    {"think", "<think>", "</think>"},
};

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// How many bytes at the end of `s` could begin `mark` (a mark split across tokens).
size_t partial_mark(std::string_view s, std::string_view mark) {
  for (size_t k = std::min(s.size(), mark.size() - 1); k > 0; --k)
    if (s.substr(s.size() - k) == mark.substr(0, k)) return k;
  return 0;
}

}  // namespace

const std::vector<ReasoningFormat>& reasoning_formats() { return kFormats; }

const ReasoningFormat* detect_reasoning_format(const ChatTemplate& chat) {
  if (!chat.is_jinja()) return nullptr;
  constexpr std::string_view kThought = "Thinking it over.";
  const json user = {{"role", "user"}, {"content", "What is two and two?"}};
  const json with_reasoning = json::array(
      {user, {{"role", "assistant"}, {"reasoning_content", kThought}, {"content", "Four."}}});
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

ReasonedAnswer read_reasoning(const ReasoningFormat& format, bool inside, std::string_view text, bool whole) {
  ReasonedAnswer out;
  const std::string_view begin = format.begin, end = format.end;
  std::string_view rest = text;
  if (!inside) {
    std::string_view opening = text;
    while (!opening.empty() && is_space(opening.front())) opening.remove_prefix(1);
    if (opening.starts_with(begin)) {
      rest = opening.substr(begin.size());
    } else if (!whole && begin.starts_with(opening)) {
      return out;  // it may still open
    } else {
      out.content = text;
      return out;
    }
  }
  const size_t closed = rest.find(end);
  if (closed == std::string_view::npos) {
    out.reasoning = trimmed(whole ? rest : rest.substr(0, rest.size() - partial_mark(rest, end)));
    return out;
  }
  out.reasoning = trimmed(rest.substr(0, closed));
  std::string_view after = rest.substr(closed + end.size());
  while (!after.empty() && is_space(after.front())) after.remove_prefix(1);
  out.content = after;
  return out;
}

}  // namespace kiln::text
