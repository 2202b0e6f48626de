// `kiln export SOURCE --format hf --out DIR`: a Kiln GPT run, or a model
// Kiln loaded from hf:DIR, as a Hugging Face folder.
#pragma once
#include <string>

namespace kiln::recipes {

void export_hf(const std::string& source, const std::string& out);

}  // namespace kiln::recipes
