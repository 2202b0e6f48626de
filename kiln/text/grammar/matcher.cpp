#include "kiln/text/grammar/matcher.h"

#include <algorithm>
#include <set>

#include "kiln/core/error.h"

namespace kiln::text {

namespace {

// Ambiguous grammars can multiply stacks; past this many the text is refused
// rather than the memory taken (llama.cpp keeps no bound).
// Expanding one stack visits at most this many frames.
constexpr size_t kMaxStacks = 1 << 16;
constexpr size_t kMaxDepth = 2048;
constexpr size_t kMaxFrames = size_t(1) << 22;

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
  KILN_CHECK(g_ && g_->root >= 0, "GrammarMatcher: no grammar");
  const auto& root = g_->rules[size_t(g_->root)];
  for (int a = 0; a < int(root.alternatives.size()); ++a) expand({{g_->root, a, 0}}, state_.stacks);
  std::sort(state_.stacks.begin(), state_.stacks.end());
  state_.stacks.erase(std::unique(state_.stacks.begin(), state_.stacks.end()), state_.stacks.end());
}

const GrammarElement& GrammarMatcher::top(const Stack& s) const {
  const Frame& f = s.back();
  return g_->rules[size_t(f.rule)].alternatives[size_t(f.alternative)][size_t(f.position)];
}

// Resolves a stack until its top is a character element (or it is empty),
// through finished sequences and every alternative of a referenced rule, as
// llama.cpp's llama_grammar_advance_stack does: a reference that ends its
// sequence leaves no frame behind (a tail call), and a stack met twice is
// expanded once, so rules that can match nothing cannot loop. Grammars whose
// stacks would still grow without end (left recursion through rules that match
// nothing only indirectly, which llama.cpp does not detect) meet a bound.
void GrammarMatcher::expand(Stack s, std::vector<Stack>& out) const {
  auto finished = [&](const Frame& f) {
    return size_t(f.position) == g_->rules[size_t(f.rule)].alternatives[size_t(f.alternative)].size();
  };
  std::vector<Stack> work;
  std::set<Stack> seen;
  size_t frames = 0;
  work.push_back(std::move(s));
  while (!work.empty()) {
    Stack st = std::move(work.back());
    work.pop_back();
    while (!st.empty() && finished(st.back())) st.pop_back();
    frames += st.size();
    KILN_CHECK(st.size() <= kMaxDepth && seen.size() <= kMaxStacks && frames <= kMaxFrames, "grammar: more than ",
               kMaxDepth, " nested rules or ", kMaxStacks, " ways to continue the text (a rule that begins with itself "
               "through rules that can match nothing, or a grammar too ambiguous)");
    if (!seen.insert(st).second) continue;
    if (st.empty() || !top(st).is_rule()) {
      out.push_back(std::move(st));
      continue;
    }
    const int rule = top(st).rule;
    st.back().position += 1;  // where matching goes on once the rule is matched
    if (finished(st.back())) st.pop_back();
    const auto& alternatives = g_->rules[size_t(rule)].alternatives;
    for (int a = int(alternatives.size()) - 1; a >= 0; --a) {
      Stack next = st;
      next.push_back({rule, a, 0});
      work.push_back(std::move(next));
    }
  }
}

bool GrammarMatcher::advance(State& st, uint32_t code_point) const {
  std::vector<Stack> next;
  for (const Stack& s : st.stacks) {
    if (s.empty() || !top(s).matches(code_point)) continue;
    Stack moved = s;
    moved.back().position += 1;
    expand(std::move(moved), next);
  }
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  st.stacks = std::move(next);
  return !st.stacks.empty();
}

// The smallest code point each UTF-8 length may encode: a shorter form is
// an overlong encoding (C0 A2 for '"'), invalid, and never matched.
constexpr uint32_t kMinCodePoint[5] = {0, 0, 0x80, 0x800, 0x10000};
static bool valid_code_point(uint32_t cp, int length) {
  return cp >= kMinCodePoint[length] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
}

// Decodes UTF-8 across token boundaries (llama.cpp's decode_utf8 with a
// partial state): invalid bytes, overlong forms and surrogates end the match.
bool GrammarMatcher::feed(State& st, std::string_view bytes) const {
  for (const char ch : bytes) {
    const uint8_t b = uint8_t(ch);
    if (st.remaining > 0) {
      if ((b & 0xC0) != 0x80) return false;
      st.partial = (st.partial << 6) | (b & 0x3F);
      if (--st.remaining == 0 && (!valid_code_point(st.partial, st.length) || !advance(st, st.partial))) return false;
      continue;
    }
    if (b < 0x80) {
      if (!advance(st, b)) return false;
      continue;
    }
    const int length = b >= 0xF8 ? 0 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (length == 0) return false;
    st.partial = b & (0x7F >> length);
    st.remaining = length - 1;
    st.length = length;
  }
  if (st.remaining == 0) return true;
  // A character begun: keep the stacks that could take some valid completion of it.
  const int shift = 6 * st.remaining;
  const uint32_t lo = std::max(st.partial << shift, kMinCodePoint[st.length]);
  const uint32_t hi = std::min(((st.partial + 1) << shift) - 1, uint32_t(0x10FFFF));
  if (lo > hi) return false;
  std::erase_if(st.stacks, [&](const Stack& s) { return s.empty() || !top(s).matches_any_in(lo, hi); });
  return !st.stacks.empty();
}

bool GrammarMatcher::accept(std::string_view bytes) {
  if (bytes.empty()) return false;
  State next = state_;
  if (!feed(next, bytes)) return false;
  state_ = std::move(next);
  return true;
}

bool GrammarMatcher::can_accept(std::string_view bytes) const {
  if (bytes.empty() || !first_char_possible(bytes)) return false;
  State copy = state_;
  return feed(copy, bytes);
}

bool GrammarMatcher::can_end() const {
  if (state_.remaining > 0) return false;
  return std::any_of(state_.stacks.begin(), state_.stacks.end(), [](const Stack& s) { return s.empty(); });
}

// A cheap first test: a token starting with a whole ASCII character that no
// stack's top takes is refused without copying the state.
bool GrammarMatcher::first_char_possible(std::string_view bytes) const {
  const uint8_t b = uint8_t(bytes[0]);
  if (state_.remaining > 0 || b >= 0x80) return true;
  return std::any_of(state_.stacks.begin(), state_.stacks.end(),
                     [&](const Stack& s) { return !s.empty() && top(s).matches(b); });
}

void GrammarMatcher::allowed_tokens(const std::vector<std::string>& token_bytes, std::vector<uint8_t>& allowed) const {
  allowed.assign(token_bytes.size(), 0);
  for (size_t i = 0; i < token_bytes.size(); ++i) allowed[i] = can_accept(token_bytes[i]) ? 1 : 0;
}

}  // namespace kiln::text
