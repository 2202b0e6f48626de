// kiln train sft: supervised fine-tuning of a Hugging Face causal language
// model (or a fortunes-gpt run) on JSON Lines examples, every weight or LoRA
// adapters (apps/recipes/sft_data.h, sft_model.h).
#pragma once
#include "apps/recipes/recipe.h"

namespace kiln::recipes {

std::unique_ptr<Recipe> make_sft_recipe();

}  // namespace kiln::recipes
