// fortunes-classify: which fortunes file a fortune came from ("people",
// "computers", "politics", ...), from its text: a small transformer on the
// GPT backbone (models/gpt/text_classifier.h) over the fortunes
// SentencePiece tokenizer. Reports test accuracy beside the majority-class
// baseline.
#pragma once
#include "apps/recipes/recipe.h"

namespace kiln::recipes {

std::unique_ptr<Recipe> make_fortunes_classify_recipe();

// A file is a class when it holds at least this many fortunes.
inline constexpr int64_t kMinFortunesPerClass = 400;

}  // namespace kiln::recipes
