// A Hugging Face tokenizer, read from tokenizer.json and run as the pipeline
// that file spells out (as the `tokenizers` library runs it):
//   added tokens that are not "normalized" are split off the raw text first;
//   each remaining piece is normalized, the "normalized" added tokens are
//   split off it, and the rest is pre-tokenized into words, each encoded by
//   the model (BPE or WordPiece); the post-processor adds BOS/EOS/CLS/SEP.
//   An added token's lstrip/rstrip take the whitespace beside it along, and
//   a single_word token matches only between word boundaries.
// Decoding maps ids to token strings and runs the decoder chain.
// Every stage type the supported families use is implemented; any other
// type in the file is refused by name when the tokenizer is loaded.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/text/stages.h"

namespace kiln::text {

class HfTokenizer {
 public:
  // Reads tokenizer.json; throws kiln::Error naming the file and the defect.
  static HfTokenizer from_file(const std::string& path);
  static HfTokenizer from_json_text(const std::string& json_text, const std::string& origin);
  static HfTokenizer from_json(const nlohmann::json& j, const std::string& origin);

  // The ids `tokenizer(text)` gives in transformers (special tokens added
  // by the post-processor when add_special_tokens). parse_special false reads
  // a special token's spelling in the text as text (tokenizers'
  // encode_special_tokens, llama.cpp's parse_special false); added tokens
  // that are not special are still matched, as in both.
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens = true, bool parse_special = true) const;
  // `tokenizer(a, b)`: the pair joined as the post-processor's pair form
  // joins it, with token_type_ids, as a batch of pairs is (an empty b is
  // still a pair there, as CrossEncoder and the rerank servers send it);
  // past `max_tokens` (0: no bound) the longer text loses its last tokens
  // first (transformers' longest_first).
  TokenPair encode_pair(const std::string& a, const std::string& b, int64_t max_tokens = 0) const;
  // `tokenizer.decode(ids, skip_special_tokens=...)`. Invalid UTF-8 from
  // byte tokens becomes U+FFFD, as there; ids past the vocabulary are left out.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const;

  // The bytes token `id` adds to a text, as llama.cpp's token_to_piece gives
  // them to a grammar: a byte token, or a byte-level token holding part of a
  // character, gives its bytes (not U+FFFD), and a leading space stays. An
  // added token gives its content.
  std::string token_bytes(int32_t id) const;

  int64_t vocab_size() const { return int64_t(id_to_token_.size()); }
  std::optional<int32_t> token_to_id(const std::string& token) const;
  const std::string& id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
    std::string pattern;  // what it matches: its content, normalized when `normalized` (as tokenizers' trie does)
  };
  // `text` cut at the added tokens of one pass (normalized or not): the
  // pieces between them (with where each starts) and the tokens' ids, in order.
  struct Piece {
    std::string text;
    size_t start;
    int32_t id;  // -1: text to encode further
  };
  std::vector<Piece> split_added(const std::string& text, bool normalized_pass, bool parse_special) const;
  void encode_piece(const std::string& piece, bool at_text_start, bool parse_special, std::vector<int32_t>& ids) const;

  std::vector<AddedToken> added_;  // longest first, for matching
  // added_ by the first byte of their pattern, one table per pass (raw, normalized):
  // most positions of a text start no added token, and are passed over at once.
  std::array<std::vector<uint32_t>, 256> added_by_byte_[2];  // indices into added_
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<TokenModel> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int32_t> added_ids_;
  std::vector<bool> special_;
};

// Decodes a stream of ids a token at a time and gives out only whole UTF-8
// characters, with the spacing that decoding the whole sequence gives
// (tokenizers' DecodeStream): what generation streams to a client.
class DecodeStream {
 public:
  explicit DecodeStream(const HfTokenizer& tokenizer, bool skip_special_tokens = true)
      : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}
  // The text this token completes (possibly empty).
  std::string step(int32_t id);
  // At the end of the stream: what is held back (bytes of a character the
  // end cut short), as decoding the whole sequence gives it (U+FFFD), as
  // transformers' decode and llama-server give it.
  std::string flush();

 private:
  const HfTokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  // Decoding starts at the tokens of the last piece handed out (prefix_
  // is their text), as tokenizers' DecodeStream does: from its last token
  // alone, a character spelled by several byte tokens would be cut, and a
  // ByteFallback decoder turns every byte of a broken run into U+FFFD,
  // the next character's included.
  size_t prefix_index_ = 0, read_index_ = 0;
  std::string prefix_;
};

}  // namespace kiln::text
