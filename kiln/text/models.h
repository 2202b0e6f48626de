// The token models of tokenizer.json: BPE (byte-level as GPT-2 and Llama 3,
// or SentencePiece-style with byte fallback as Llama 2 and Mistral),
// WordPiece (BERT) and Unigram (T5, XLM-RoBERTa, ALBERT).
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/text/stages.h"

namespace kiln::text {

// The most ids a tokenizer may leave unused between its tokens.
inline constexpr size_t kMaxIdGap = 65536;

std::unique_ptr<TokenModel> make_bpe(const nlohmann::json& j);
std::unique_ptr<TokenModel> make_wordpiece(const nlohmann::json& j);
std::unique_ptr<TokenModel> make_unigram(const nlohmann::json& j);

// A model's "vocab" object, token -> id. Ids index a table of tokens, so
// they must be about as many as the entries: a hostile file cannot make Kiln
// allocate 2^31 slots.
std::unordered_map<std::string, int32_t> read_vocab(const nlohmann::json& j, const char* model);
// A token id as tokenizer.json writes it: an integer in [0, 2^31). Anything
// else (a float, a huge or negative number) is refused with `what` named,
// rather than cast, which for a float out of range is undefined behaviour.
int32_t read_token_id(const nlohmann::json& id, const std::string& what);
// j[key] as a count (the same range), or `fallback` when absent.
size_t read_count(const nlohmann::json& j, const char* key, size_t fallback);
// The tokens in id order (gaps empty).
std::vector<std::string> tokens_by_id(const std::unordered_map<std::string, int32_t>& vocab);

}  // namespace kiln::text
