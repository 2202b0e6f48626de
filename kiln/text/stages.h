// The stages of a tokenizer.json pipeline. Each is built from its JSON object
// by a table keyed by its "type" (stages.cpp), and an unknown type is an
// error naming it.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace kiln::text {

// Every `from` in `s` replaced by `to`, left to right (tokenizers' Replace with a string; llama-server's
// string_replace_all).
std::string replace_all(std::string s, const std::string& from, const std::string& to);

// Text -> text (no offsets are kept: Kiln needs ids, not alignments).
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `at_text_start`: this piece begins the input (not after an added token).
  virtual std::string normalize(std::string s, bool at_text_start) const = 0;
};

// Text -> words. Each word is encoded by the model on its own.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits every word of `words` further, in order.
  virtual void split(std::vector<std::string>& words, bool at_text_start) const = 0;
};

// A word -> ids.
class TokenModel {
 public:
  virtual ~TokenModel() = default;
  virtual void encode_word(const std::string& word, std::vector<int32_t>& ids) const = 0;
  // id -> token string, for every id of the model's own vocabulary.
  virtual std::vector<std::string> vocabulary() const = 0;
};

// A pair of sequences with their special tokens: ids, and each one's token
// type (transformers' token_type_ids: 0 for the first sequence's part, 1
// for the second's, as the template says).
struct TokenPair {
  std::vector<int32_t> ids, types;
};

// A pair as tokenizers joins it without a template: a then b, types 0 and 1.
TokenPair plain_pair(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

// Adds the special tokens around a sequence, or a pair of them (a
// cross-encoder's query and document).
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::vector<int32_t> process(std::vector<int32_t> ids) const = 0;
  virtual TokenPair process_pair(const std::vector<int32_t>& a, const std::vector<int32_t>& b) const {
    return plain_pair(a, b);
  }
};

// Token strings -> token strings (the last decoder's are joined). `raw`:
// the bytes the tokens stand for, as llama.cpp's token_to_piece gives them
// to a grammar: bytes of a character split across tokens stay bytes (not
// U+FFFD), and no leading space is stripped.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode(std::vector<std::string> tokens, bool raw = false) const = 0;
};

// Builders; each throws kiln::Error naming an unsupported "type".
// `token_id` looks a token string up in the whole vocabulary (for post-processors).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j);
std::unique_ptr<TokenModel> make_model(const nlohmann::json& j);
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j);

}  // namespace kiln::text
