// The token models of tokenizer.json: BPE (byte-level as GPT-2 and Llama 3,
// or SentencePiece-style with byte fallback as Llama 2 and Mistral) and
// WordPiece (BERT).
#pragma once
#include "kiln/core/error.h"
#include "kiln/text/stages.h"

namespace kiln::text {

// The most ids a tokenizer may leave unused between its tokens.
inline constexpr size_t kMaxIdGap = 65536;

std::unique_ptr<TokenModel> make_bpe(const nlohmann::json& j);

// Ids index a table of tokens, so a vocabulary's ids must be about as many
// as its entries: a hostile file cannot make Kiln allocate 2^31 slots.
template <typename Map>
void check_dense_ids(const Map& vocab) {
  for (const auto& [token, id] : vocab)
    KILN_CHECK(size_t(id) < vocab.size() + kMaxIdGap, "tokenizer.json: vocab id ", id, " of '", token,
               "' is far beyond the vocabulary's ", vocab.size(), " entries");
}
std::unique_ptr<TokenModel> make_wordpiece(const nlohmann::json& j);

}  // namespace kiln::text
