// kiln train classify: fine-tune a Hugging Face model as a text classifier on
// JSON Lines {"text", "label"} examples: a BERT-family classifier with its own
// head (or a new one when the data's labels are not the model's), or a
// causal language model with a new head on its last token
// (models/common/sequence_classifier.h). The labels come from the data and
// are saved with the run as id2label; kiln eval prints accuracy and a
// confusion matrix.
#pragma once
#include "apps/recipes/recipe.h"

namespace kiln::recipes {

std::unique_ptr<Recipe> make_classify_finetune_recipe();

}  // namespace kiln::recipes
