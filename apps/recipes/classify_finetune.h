// kiln train classify: fine-tune a Hugging Face model as a text classifier on
// JSON Lines {"text", "label"} examples: a BERT-family classifier with its own
// head (or a new one when the data's labels are not the model's), or a
// causal language model with a new head on its last token
// (models/common/sequence_classifier.h). The labels come from the data and
// are saved with the run as id2label; kiln eval prints accuracy and a
// confusion matrix.
#pragma once
#include "apps/recipes/recipe.h"
#include "kiln/io/checkpoint.h"
#include "models/hf/hf_export.h"

namespace kiln::recipes {

std::unique_ptr<Recipe> make_classify_finetune_recipe();

// A run's classifier as a Hugging Face folder: the base's files with the
// run's labels as id2label; a BERT-family model under its own names, a
// causal LM as <Arch>ForSequenceClassification (its body and "score").
models::HfFolderContents classifier_as_hf(const Checkpoint& ck);

}  // namespace kiln::recipes
