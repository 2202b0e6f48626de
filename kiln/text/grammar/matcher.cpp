#include "kiln/text/grammar/matcher.h"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "kiln/core/error.h"

namespace kiln::text {

namespace {

// Bounds where llama.cpp keeps none: an ambiguous grammar can multiply the
// ways text goes on, and a rule that begins with itself through rules that
// match nothing grows stacks without end. Past them the text is refused with
// an error rather than the memory or the time taken.
constexpr size_t kMaxStacks = 1 << 16;       // ways to go on after a character
constexpr size_t kMaxExpansion = 4096;       // distinct stacks one expansion visits
constexpr size_t kMaxDepth = 2048;           // frames on one stack
constexpr size_t kMaxFrames = size_t(1) << 22;  // frames one expansion visits

// The smallest code point each UTF-8 length may encode: a shorter form is
// an overlong encoding (C0 A2 for '"'), invalid, and never matched.
constexpr uint32_t kMinCodePoint[5] = {0, 0, 0x80, 0x800, 0x10000};
bool valid_code_point(uint32_t cp, int length) {
  return cp >= kMinCodePoint[length] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
}

// Decodes UTF-8 across token boundaries (llama.cpp's decode_utf8 with a
// partial state), calling on_code_point for each whole character until it
// says stop; invalid bytes, overlong forms and surrogates end it too.
template <typename OnCodePoint>
bool decode_utf8(std::string_view bytes, uint32_t& partial, int& remaining, int& length, OnCodePoint&& on_code_point) {
  for (const char ch : bytes) {
    const uint8_t b = uint8_t(ch);
    if (remaining > 0) {
      if ((b & 0xC0) != 0x80) return false;
      partial = (partial << 6) | (b & 0x3F);
      if (--remaining == 0 && (!valid_code_point(partial, length) || !on_code_point(partial))) return false;
      continue;
    }
    if (b < 0x80) {
      if (!on_code_point(b)) return false;
      continue;
    }
    length = b >= 0xF8 ? 0 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (length == 0) return false;
    partial = b & (0x7F >> length);
    remaining = length - 1;
  }
  return true;
}

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
  std::vector<Stack> seen;  // few, typically: a linear search beats a tree's allocations
  size_t frames = 0;
  work.push_back(std::move(s));
  while (!work.empty()) {
    Stack st = std::move(work.back());
    work.pop_back();
    while (!st.empty() && finished(st.back())) st.pop_back();
    frames += st.size();
    KILN_CHECK(st.size() <= kMaxDepth && seen.size() <= kMaxExpansion && frames <= kMaxFrames, "grammar: more than ",
               kMaxDepth, " nested rules or ", kMaxExpansion, " ways to expand a rule (a rule that begins with itself "
               "through rules that can match nothing, or a grammar too ambiguous)");
    if (std::find(seen.begin(), seen.end(), st) != seen.end()) continue;
    seen.push_back(st);
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
  KILN_CHECK(next.size() <= kMaxStacks, "grammar: more than ", kMaxStacks,
             " ways to continue the text (the grammar is too ambiguous)");
  st.stacks = std::move(next);
  return !st.stacks.empty();
}

// A character begun and not finished: keeps the stacks that could take some
// valid completion of it.
bool GrammarMatcher::keep_partial(std::vector<Stack>& stacks, uint32_t partial, int remaining, int length) const {
  if (remaining == 0) return !stacks.empty();
  const int shift = 6 * remaining;
  const uint32_t lo = std::max(partial << shift, kMinCodePoint[length]);
  const uint32_t hi = std::min(((partial + 1) << shift) - 1, uint32_t(0x10FFFF));
  if (lo > hi) return false;
  std::erase_if(stacks, [&](const Stack& s) { return s.empty() || !top(s).matches_any_in(lo, hi); });
  return !stacks.empty();
}

bool GrammarMatcher::feed(State& st, std::string_view bytes) const {
  return decode_utf8(bytes, st.partial, st.remaining, st.length, [&](uint32_t cp) { return advance(st, cp); }) &&
         keep_partial(st.stacks, st.partial, st.remaining, st.length);
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

// Every token from one state, walking the vocabulary's trie: the states
// reached by whole characters are numbered and each (state, character)
// step computed once (a table for ASCII), and a prefix the grammar refuses
// skips every token that starts with it. Thousands of tokens pass through
// the same few states (inside a string each letter leads back to where it
// started), so a mask costs about a table lookup per distinct prefix.
template <typename OnToken, typename OnContext>
void GrammarMatcher::walk(const TokenTrie& trie, State start, OnToken&& on_token, OnContext&& on_context) const {
  std::vector<std::vector<Stack>> states;
  std::vector<uint8_t> has_empty;  // per state: some stack is used up
  std::unordered_map<std::string, int> ids;
  std::vector<std::array<int, 128>> ascii_steps;  // per state; kUnknown until computed, -1: refused
  std::unordered_map<uint64_t, int> other_steps;
  // The next state depends only on which stacks take the character: per
  // state, by that set (as bits; states of more than 64 stacks step each
  // character alone), so the thousands of CJK characters a string takes
  // cost one advance.
  std::vector<std::unordered_map<uint64_t, int>> steps_by_takers;
  std::unordered_map<uint64_t, bool> partial_ok;  // (state, character begun): some completion is taken
  constexpr int kUnknown = -2;
  auto intern = [&](std::vector<Stack>&& stacks) {
    std::string key;
    for (const Stack& st : stacks) {
      key.push_back('|');
      for (const Frame& f : st) key.append(reinterpret_cast<const char*>(&f), sizeof f);
    }
    auto [it, added] = ids.try_emplace(std::move(key), int(states.size()));
    if (added) {
      has_empty.push_back(std::any_of(stacks.begin(), stacks.end(), [](const Stack& s) { return s.empty(); }));
      states.push_back(std::move(stacks));
      ascii_steps.emplace_back().fill(kUnknown);
      steps_by_takers.emplace_back();
    }
    return it->second;
  };
  auto step = [&](int id, uint32_t cp) {
    if (cp < 128 && ascii_steps[size_t(id)][cp] != kUnknown) return ascii_steps[size_t(id)][cp];
    const uint64_t key = (uint64_t(uint32_t(id)) << 21) | cp;
    if (cp >= 128)
      if (auto it = other_steps.find(key); it != other_steps.end()) return it->second;
    const std::vector<Stack>& stacks = states[size_t(id)];
    int next = kUnknown;
    uint64_t takers = 0;
    const bool by_takers = stacks.size() <= 64;
    if (by_takers) {
      for (size_t k = 0; k < stacks.size(); ++k)
        if (!stacks[k].empty() && top(stacks[k]).matches(cp)) takers |= uint64_t(1) << k;
      if (takers == 0) next = -1;
      else if (auto it = steps_by_takers[size_t(id)].find(takers); it != steps_by_takers[size_t(id)].end())
        next = it->second;
    }
    if (next == kUnknown) {
      State st;
      st.stacks = stacks;
      next = advance(st, cp) ? intern(std::move(st.stacks)) : -1;  // (intern may move the tables)
      if (by_takers) steps_by_takers[size_t(id)].emplace(takers, next);
    }
    if (cp < 128) ascii_steps[size_t(id)][cp] = next;
    else other_steps.emplace(key, next);
    return next;
  };
  struct Level {
    int state;
    uint32_t partial;
    int remaining, length;
  };
  auto completes = [&](const Level& l) {  // some completion of the character begun is taken
    const uint64_t key = (uint64_t(uint32_t(l.state)) << 32) | (uint64_t(l.remaining) << 24) | l.partial;
    auto it = partial_ok.find(key);
    if (it == partial_ok.end()) {
      std::vector<Stack> stacks = states[size_t(l.state)];
      it = partial_ok.emplace(key, keep_partial(stacks, l.partial, l.remaining, l.length)).first;
    }
    return it->second;
  };
  std::vector<Level> at(trie.max_depth() + 1);
  at[0] = {intern(std::move(start.stacks)), start.partial, start.remaining, start.length};
  const auto& nodes = trie.nodes();
  std::vector<uint8_t> taken(trie.size(), 0);  // (for the duplicates)
  for (size_t i = 0; i < nodes.size();) {
    const TokenTrie::Node& n = nodes[i];
    Level l = at[n.depth - 1];
    const uint8_t b = n.byte;
    bool ok;
    if (l.remaining > 0) {  // a continuation byte
      ok = (b & 0xC0) == 0x80;
      if (ok) {
        l.partial = (l.partial << 6) | (b & 0x3F);
        if (--l.remaining == 0)
          ok = valid_code_point(l.partial, l.length) && (l.state = step(l.state, l.partial)) >= 0;
        else
          ok = completes(l);
      }
    } else if (b < 0x80) {
      ok = (l.state = step(l.state, b)) >= 0;
    } else {  // a character's first byte
      l.length = b >= 0xF8 ? 0 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
      l.partial = b & (0x7F >> l.length);
      l.remaining = l.length - 1;
      ok = l.length > 0 && completes(l);
    }
    if (!ok) {
      i = n.subtree_end;
      continue;
    }
    at[n.depth] = l;
    if (n.token >= 0) {  // a character begun here can be completed (checked above)
      taken[size_t(n.token)] = 1;
      on_token(n.token);
    }
    if (l.remaining == 0 && has_empty[size_t(l.state)] && n.subtree_end > i + 1)
      on_context(uint32_t(i + 1), n.subtree_end);
    ++i;
  }
  for (const auto& [node, token] : trie.duplicates())
    if (taken[size_t(nodes[node].token)]) on_token(token);
}

// Inside a character begun by the last token, the whole walk: only tokens
// that start with its continuation bytes go past their first byte.
TokenSet GrammarMatcher::allowed_tokens(const TokenTrie& vocab, MaskCache* cache) const {
  if (cache && state_.remaining == 0) return allowed_by_stacks(vocab, *cache);
  TokenSet allowed(vocab.size());
  walk(vocab, state_, [&](int32_t token) { allowed.insert(size_t(token)); }, [](uint32_t, uint32_t) {});
  return allowed;
}

namespace {
// The frames a StackMask is keyed on: deep enough that a string's tokens
// stay inside them (a string's own rule, its repetition and its character
// are three), shallow enough that every string of a schema shares them.
constexpr size_t kDecidingFrames = 3;
}  // namespace

// What the frames `top` take alone (a stack's top kDecidingFrames): their
// tokens as bits, and the tokens that run past them (below a prefix after
// which the frames are used up), with a trie of their own.
std::shared_ptr<const StackMask> GrammarMatcher::stack_mask(const TokenTrie& vocab, Stack top) const {
  auto m = std::make_shared<StackMask>(StackMask{TokenSet(vocab.size()), {}, TokenTrie({})});
  std::vector<std::pair<uint32_t, uint32_t>> past;  // node ranges, disjoint
  walk(vocab, State{{std::move(top)}}, [&](int32_t t) { m->accepted.insert(size_t(t)); },
       [&](uint32_t begin, uint32_t end) {
         if (past.empty() || begin >= past.back().second) past.emplace_back(begin, end);
       });
  auto taken = [&](int32_t t) { return m->accepted.contains(size_t(t)); };
  const auto& nodes = vocab.nodes();
  auto inside = [&](uint32_t node) {
    auto it = std::upper_bound(past.begin(), past.end(), node, [](uint32_t n, const auto& r) { return n < r.first; });
    return it != past.begin() && node < std::prev(it)->second;
  };
  for (const auto& [begin, end] : past)
    for (uint32_t n = begin; n < end; ++n)
      if (nodes[n].token >= 0 && !taken(nodes[n].token)) m->undecided.push_back(nodes[n].token);
  for (const auto& [node, token] : vocab.duplicates())
    if (inside(node) && !taken(token)) m->undecided.push_back(token);
  std::vector<std::string> bytes;
  for (int32_t t : m->undecided) bytes.push_back(vocab.bytes(size_t(t)));
  m->undecided_trie = TokenTrie(std::move(bytes));
  return m;
}

// The union over the state's stacks of what each takes: what its top
// kDecidingFrames frames take alone (a StackMask, kept by the cache), and
// of the tokens that run past them, those the whole stack takes (walked on
// a trie of just those tokens).
TokenSet GrammarMatcher::allowed_by_stacks(const TokenTrie& vocab, MaskCache& cache) const {
  TokenSet allowed(vocab.size());
  std::vector<std::pair<const Stack*, std::shared_ptr<const StackMask>>> deeper;
  for (const Stack& s : state_.stacks) {
    if (s.empty()) continue;
    const size_t first = s.size() - std::min(s.size(), kDecidingFrames);
    std::string key;
    for (size_t f = first; f < s.size(); ++f) key.append(reinterpret_cast<const char*>(&s[f]), sizeof(Frame));
    auto mask = cache.stack_mask(key, [&] { return stack_mask(vocab, Stack(s.begin() + std::ptrdiff_t(first), s.end())); });
    allowed |= mask->accepted;
    if (first > 0 && !mask->undecided.empty()) deeper.emplace_back(&s, std::move(mask));
  }
  for (const auto& stack_and_mask : deeper) {
    const StackMask& mask = *stack_and_mask.second;
    walk(mask.undecided_trie, State{{*stack_and_mask.first}},
         [&](int32_t t) { allowed.insert(size_t(mask.undecided[size_t(t)])); }, [](uint32_t, uint32_t) {});
  }
  return allowed;
}

std::string GrammarMatcher::state_key() const {
  std::string key;
  auto put = [&](int32_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(int32_t(state_.partial));
  put(state_.remaining);
  put(state_.length);
  for (const Stack& s : state_.stacks) {
    put(int32_t(s.size()));
    for (const Frame& f : s) put(f.rule), put(f.alternative), put(f.position);
  }
  return key;
}

namespace {
// What a kept mask holds in memory, about (an undecided token: its id, and ~32 bytes of trie nodes and text).
size_t footprint(const TokenSet& mask) { return mask.bytes(); }
size_t footprint(const StackMask& mask) {
  return mask.accepted.bytes() + mask.undecided.size() * (sizeof(int32_t) + 32);
}

// The value `map` keeps under `key`, made by `make` (outside the lock) the
// first time and kept while the map's values take at most `max_bytes`.
template <typename Map, typename Make>
typename Map::mapped_type kept_or_made(std::mutex& mutex, Map& map, size_t& bytes, size_t max_bytes,
                                       const std::string& key, Make&& make) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = map.find(key); it != map.end()) return it->second;
  }
  typename Map::mapped_type value = make();
  const size_t size = footprint(*value) + key.size();
  std::lock_guard<std::mutex> lock(mutex);
  if (bytes + size <= max_bytes && map.emplace(key, value).second) bytes += size;
  return value;
}
}  // namespace

std::shared_ptr<const TokenSet> MaskCache::allowed(const GrammarMatcher& m, const TokenTrie& vocab) {
  return kept_or_made(mutex_, masks_, mask_bytes_, max_bytes_, m.state_key(),
                      [&] { return std::make_shared<const TokenSet>(m.allowed_tokens(vocab, this)); });
}

std::shared_ptr<const StackMask> MaskCache::stack_mask(const std::string& key,
                                                       const std::function<std::shared_ptr<const StackMask>()>& make) {
  return kept_or_made(mutex_, stack_masks_, stack_mask_bytes_, max_bytes_, key, make);
}

}  // namespace kiln::text
