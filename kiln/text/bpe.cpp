// Byte-pair encoding as the `tokenizers` library runs it: a word starts as
// its characters (or, with byte fallback, the <0xXX> tokens of characters
// the vocabulary lacks), and the adjacent pair with the lowest merge rank is
// merged, leftmost first, until no pair has a merge. A heap keeps that
// O(n log n) for words of any length (a run of thousands of spaces is one word).
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <shared_mutex>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/text/models.h"
#include "kiln/text/utf8.h"

namespace kiln::text {
namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

class Bpe : public TokenModel {
 public:
  explicit Bpe(const nlohmann::json& j) {
    // null and "" both mean none (tokenizers' serde default); a real prefix or suffix changes the merges.
    for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
      if (j.contains(key) && !j[key].is_null() && j[key] != "")
        KILN_FAIL("tokenizer.json: BPE \"", key, "\" = ", j[key].dump(), " is not supported");
    byte_fallback_ = j.value("byte_fallback", false);
    fuse_unk_ = j.value("fuse_unk", false);
    ignore_merges_ = j.value("ignore_merges", false);
    vocab_ = read_vocab(j, "BPE");
    if (j.contains("unk_token") && j["unk_token"].is_string()) {
      auto it = vocab_.find(j["unk_token"].get<std::string>());
      KILN_CHECK(it != vocab_.end(), "tokenizer.json: BPE unk_token '", j["unk_token"].get<std::string>(),
                 "' is not in the vocabulary");
      unk_ = it->second;
    }
    const auto& merges = j.value("merges", nlohmann::json::array());
    KILN_CHECK(merges.is_array(), "tokenizer.json: BPE \"merges\" is not an array");
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      std::string a, b;
      const auto& m = merges[rank];
      if (m.is_string()) {  // older files: "a b"
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ', 1);
        KILN_CHECK(space != std::string::npos, "tokenizer.json: merge ", rank, " '", s, "' is not two tokens");
        a = s.substr(0, space), b = s.substr(space + 1);
      } else {
        KILN_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                   "tokenizer.json: merge ", rank, " is not a pair of strings");
        a = m[0].get<std::string>(), b = m[1].get<std::string>();
      }
      const auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
      KILN_CHECK(ia != vocab_.end() && ib != vocab_.end() && iab != vocab_.end(), "tokenizer.json: merge ", rank,
                 " ('", a, "', '", b, "') names a token the vocabulary lacks");
      merges_.emplace(pair_key(ia->second, ib->second), Merge{int32_t(rank), iab->second});
    }
  }

  void encode_word(const std::string& word, std::vector<int32_t>& ids) const override {
    if (ignore_merges_) {
      if (auto it = vocab_.find(word); it != vocab_.end()) return ids.push_back(it->second);
    }
    {
      std::shared_lock lock(cache_mutex_);
      if (auto it = cache_.find(word); it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> out = merge_word(word);
    ids.insert(ids.end(), out.begin(), out.end());
    if (word.size() <= 256) {  // short words repeat; long ones would only fill the cache
      std::unique_lock lock(cache_mutex_);
      if (cache_.size() > 100000) cache_.clear();
      cache_.emplace(word, std::move(out));
    }
  }

  std::vector<std::string> vocabulary() const override { return tokens_by_id(vocab_); }

 private:
  struct Merge {
    int32_t rank, id;
  };
  struct Symbol {
    int32_t id;
    int prev, next;  // -1 at the ends
    bool alive = true;
  };

  std::vector<int32_t> merge_word(const std::string& word) const {
    std::vector<Symbol> symbols;
    bool last_was_unk = false;
    auto push = [&](int32_t id) {
      const int i = int(symbols.size());
      symbols.push_back({id, i - 1, -1});
      if (i > 0) symbols[size_t(i - 1)].next = i;
    };
    for (size_t i = 0; i < word.size();) {
      size_t n = utf8_char_length(word, i);
      if (n == 0) n = 1;  // input is repaired before this; be safe anyway
      const std::string ch = word.substr(i, n);
      i += n;
      if (auto it = vocab_.find(ch); it != vocab_.end()) {
        push(it->second), last_was_unk = false;
        continue;
      }
      if (byte_fallback_ && push_bytes(ch, push)) {
        last_was_unk = false;
        continue;
      }
      if (unk_ && !(fuse_unk_ && last_was_unk)) push(*unk_);
      last_was_unk = unk_.has_value();
    }
    using Candidate = std::pair<int32_t, int>;  // (rank, left symbol): smallest first
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    auto consider = [&](int left) {
      const int right = symbols[size_t(left)].next;
      if (right < 0) return;
      auto it = merges_.find(pair_key(symbols[size_t(left)].id, symbols[size_t(right)].id));
      if (it != merges_.end()) heap.emplace(it->second.rank, left);
    };
    for (int i = 0; i + 1 < int(symbols.size()); ++i) consider(i);
    while (!heap.empty()) {
      const auto [rank, left] = heap.top();
      heap.pop();
      Symbol& l = symbols[size_t(left)];
      if (!l.alive || l.next < 0) continue;
      Symbol& r = symbols[size_t(l.next)];
      auto it = merges_.find(pair_key(l.id, r.id));
      if (it == merges_.end() || it->second.rank != rank) continue;  // stale: a neighbour changed
      l.id = it->second.id;
      r.alive = false;
      l.next = r.next;
      if (r.next >= 0) symbols[size_t(r.next)].prev = left;
      if (l.prev >= 0) consider(l.prev);
      consider(left);
    }
    std::vector<int32_t> out;
    for (const Symbol& s : symbols)
      if (s.alive) out.push_back(s.id);
    return out;
  }

  template <typename Push>
  bool push_bytes(const std::string& ch, Push& push) const {
    std::vector<int32_t> ids;
    for (unsigned char b : ch) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = vocab_.find(name);
      if (it == vocab_.end()) return false;
      ids.push_back(it->second);
    }
    for (int32_t id : ids) push(id);
    return true;
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace

std::unique_ptr<TokenModel> make_bpe(const nlohmann::json& j) { return std::make_unique<Bpe>(j); }

}  // namespace kiln::text
