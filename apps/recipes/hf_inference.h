// Hugging Face folders served by `kiln serve --model NAME=hf:DIR`: causal
// language models answer completions, BERT-family classifiers /v1/classify.
#pragma once
#include "apps/recipes/recipe.h"

namespace kiln::recipes {

LoadedModel load_hf_for_inference(const std::string& dir, Device device);

}  // namespace kiln::recipes
