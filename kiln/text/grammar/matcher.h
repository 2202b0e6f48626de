// Matching text against a Grammar (gbnf.h) as it is generated, llama.cpp's
// way: a set of stacks of positions in the grammar's sequences, each stack
// one way the text so far can continue, its top the next character element
// (an empty stack: the text so far is a whole match). Feeding a code point
// keeps the stacks whose top takes it, advanced and expanded through rule
// references; no stack left means the text can no longer match.
//
// Text arrives as tokens' bytes, and a token may end inside a UTF-8
// character (byte-level vocabularies split emoji and CJK): the matcher keeps
// the character begun, and a token ending with one is allowed where some
// completion of it could be taken.
//
// allowed_tokens() gives the tokens of a vocabulary (token_trie.h) the
// current state takes: the mask a sampler applies before temperature,
// top-k and top-p.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <string_view>
#include <vector>

#include "kiln/text/grammar/gbnf.h"
#include "kiln/text/grammar/token_set.h"
#include "kiln/text/grammar/token_trie.h"

namespace kiln::text {

class MaskCache;
struct StackMask;

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Feeds a token's bytes: true and advanced if the grammar can take them,
  // false and unchanged otherwise.
  bool accept(std::string_view bytes);
  // Whether accept(bytes) would succeed, without changing anything.
  bool can_accept(std::string_view bytes) const;
  // The text so far is a whole match (an end-of-text token may come now).
  bool can_end() const;
  // The tokens i with can_accept(vocab.bytes(i)); empty strings are never
  // allowed. With `cache`, the mask is the union of each stack's, and what a
  // stack's top frames decide alone is kept there (MaskCache::stack_mask).
  TokenSet allowed_tokens(const TokenTrie& vocab, MaskCache* cache = nullptr) const;
  // The state as bytes: two matchers of one grammar with the same key allow
  // the same tokens (what MaskCache keys on).
  std::string state_key() const;

 private:
  struct Frame {
    int rule, alternative, position;
    bool operator<(const Frame& o) const {
      if (rule != o.rule) return rule < o.rule;
      return alternative != o.alternative ? alternative < o.alternative : position < o.position;
    }
    bool operator==(const Frame& o) const {
      return rule == o.rule && alternative == o.alternative && position == o.position;
    }
  };
  using Stack = std::vector<Frame>;
  struct State {
    std::vector<Stack> stacks;
    uint32_t partial = 0;  // the bits of a UTF-8 character begun in an earlier token
    int remaining = 0;     // its continuation bytes still to come
    int length = 0;        // its whole length in bytes
  };

  const GrammarElement& top(const Stack& s) const;
  void expand(Stack s, std::vector<Stack>& out) const;
  bool advance(State& st, uint32_t code_point) const;
  bool feed(State& st, std::string_view bytes) const;
  bool keep_partial(std::vector<Stack>& stacks, uint32_t partial, int remaining, int length) const;
  bool first_char_possible(std::string_view bytes) const;
  // Walks `trie` from state `start`: on_token(id) for each token it takes,
  // on_context(begin, end) for each range of trie nodes below a prefix
  // after which some stack was empty (a truncated stack's frames are used
  // up: what follows depends on the frames below).
  template <typename OnToken, typename OnContext>
  void walk(const TokenTrie& trie, State start, OnToken&& on_token, OnContext&& on_context) const;
  TokenSet allowed_by_stacks(const TokenTrie& vocab, MaskCache& cache) const;
  std::shared_ptr<const StackMask> stack_mask(const TokenTrie& vocab, Stack top) const;

  std::shared_ptr<const Grammar> g_;
  State state_;
};

// What a stack's top frames decide alone, whatever lies below them
// (xgrammar's split of a grammar position's tokens): the tokens they take,
// and the few that run past them into the frames below (a string's token
// that closes it and goes on, `",`), checked against the whole stack.
struct StackMask {
  TokenSet accepted;
  std::vector<int32_t> undecided;  // token ids
  TokenTrie undecided_trie;        // their bytes; its ids index `undecided`
};

// Masks by matcher state, for one grammar and one vocabulary: generation
// under a grammar comes back to the same states again and again (inside a
// string, after a comma), and a mask over a 150K vocabulary takes about as
// long as a small model's decoding step. A state met for the first time is
// the union of its stacks' masks, and a stack's is mostly what its top
// frames decide (StackMask), kept here too: every string of a schema shares
// one, whatever object it sits in. Thread-safe; keeps each kind while it
// takes at most `max_bytes` (a 152K vocabulary's mask is 19 KB: the default
// holds ~1,700 states; past it a new state's mask is made each time, from
// its stacks' kept masks).
class MaskCache {
 public:
  explicit MaskCache(size_t max_bytes = size_t(32) << 20) : max_bytes_(max_bytes) {}
  // The mask for `m`'s state, computed and kept on the first visit.
  std::shared_ptr<const TokenSet> allowed(const GrammarMatcher& m, const TokenTrie& vocab);
  // The StackMask kept under `key`, made by `make` the first time.
  std::shared_ptr<const StackMask> stack_mask(const std::string& key,
                                              const std::function<std::shared_ptr<const StackMask>()>& make);

 private:
  size_t max_bytes_, mask_bytes_ = 0, stack_mask_bytes_ = 0;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const TokenSet>> masks_;
  std::unordered_map<std::string, std::shared_ptr<const StackMask>> stack_masks_;
};

}  // namespace kiln::text
