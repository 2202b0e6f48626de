// llama.cpp's sampler chain, for a request that names its samplers' order
// (llama-server's "samplers": llama.vscode and llama.vim send ["top_k",
// "top_p", "infill"]): each named sampler in turn on the candidates, as
// llama.cpp's does (top-p and min-p on the probabilities before temperature,
// temperature only where named), then a draw from the softmax of what is
// left. The penalties are applied before the chain, as Kiln always applies
// them; the samplers Kiln has not (dry, typ_p, xtc, top_n_sigma) are named
// only while their settings are off (the request's check), so they pass.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/random.h"
#include "models/common/sampling.h"

namespace kiln::models {

// What the infill sampler reads of the vocabulary: the tokens that end a
// text (llama.cpp's end-of-generation tokens; the first stands in when none
// is left), and a token's bytes (a token whose bytes start another's is
// merged into the likelier of the two).
struct InfillVocabulary {
  std::span<const int32_t> ends;
  std::function<std::string(int32_t)> bytes;
};

// Samples a token from `logits` [vocab] through `chain` (names is_chain_sampler takes).
int32_t sample_chain(std::span<const float> logits, std::span<const std::string> chain, const Sampling& s,
                     const InfillVocabulary& vocabulary, Generator& gen);

}  // namespace kiln::models
