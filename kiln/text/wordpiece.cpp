// WordPiece (BERT): each word is split greedily into the longest vocabulary
// entries, left to right, every piece after the first spelled with the
// continuing prefix ("##"). A word with an unmatched rest is one [UNK].
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/text/models.h"
#include "kiln/text/utf8.h"

namespace kiln::text {
namespace {

class WordPiece : public TokenModel {
 public:
  explicit WordPiece(const nlohmann::json& j) {
    vocab_ = read_vocab(j, "WordPiece");
    prefix_ = j.value("continuing_subword_prefix", std::string("##"));
    max_chars_ = read_count(j, "max_input_chars_per_word", 100);
    const std::string unk = j.value("unk_token", std::string("[UNK]"));
    auto it = vocab_.find(unk);
    KILN_CHECK(it != vocab_.end(), "tokenizer.json: WordPiece unk_token '", unk, "' is not in the vocabulary");
    unk_ = it->second;
  }

  void encode_word(const std::string& word, std::vector<int32_t>& ids) const override {
    std::vector<size_t> bounds;  // byte offset of each character, then the end
    for (size_t i = 0; i < word.size(); i += std::max<size_t>(1, utf8_char_length(word, i))) bounds.push_back(i);
    bounds.push_back(word.size());
    if (bounds.size() - 1 > max_chars_) return ids.push_back(unk_);
    std::vector<int32_t> pieces;
    for (size_t start = 0; start + 1 < bounds.size();) {
      size_t end = bounds.size() - 1;
      std::optional<int32_t> found;
      for (; end > start; --end) {
        std::string piece = word.substr(bounds[start], bounds[end] - bounds[start]);
        if (start > 0) piece = prefix_ + piece;
        if (auto it = vocab_.find(piece); it != vocab_.end()) {
          found = it->second;
          break;
        }
      }
      if (!found) return ids.push_back(unk_);
      pieces.push_back(*found);
      start = end;
    }
    ids.insert(ids.end(), pieces.begin(), pieces.end());
  }

  std::vector<std::string> vocabulary() const override { return tokens_by_id(vocab_); }

 private:
  std::unordered_map<std::string, int32_t> vocab_;
  std::string prefix_;
  size_t max_chars_;
  int32_t unk_;
};

}  // namespace

std::unique_ptr<TokenModel> make_wordpiece(const nlohmann::json& j) { return std::make_unique<WordPiece>(j); }

}  // namespace kiln::text
