// SentencePiece's normalization rules as tokenizer.json carries them (the
// "Precompiled" normalizer of T5, XLM-RoBERTa, ALBERT, mBART): a
// darts-clone double-array trie from input byte strings to replacement
// strings, base64-encoded in "precompiled_charsmap".
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>

#include "kiln/text/stages.h"

namespace kiln::text {

std::unique_ptr<Normalizer> make_precompiled(const nlohmann::json& j);

}  // namespace kiln::text
