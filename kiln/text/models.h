// The token models of tokenizer.json: BPE (byte-level as GPT-2 and Llama 3,
// or SentencePiece-style with byte fallback as Llama 2 and Mistral) and
// WordPiece (BERT).
#pragma once
#include "kiln/text/stages.h"

namespace kiln::text {

std::unique_ptr<TokenModel> make_bpe(const nlohmann::json& j);
std::unique_ptr<TokenModel> make_wordpiece(const nlohmann::json& j);

}  // namespace kiln::text
