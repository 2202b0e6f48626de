// `kiln export SOURCE --format hf --out DIR`: a Kiln GPT run, or a model
// Kiln loaded from hf:DIR, as a Hugging Face folder.
#pragma once
#include <string>

namespace kiln::recipes {

// `quantize` ("", int8, int4, int4z): a language model's matrices written
// quantized (Kiln's own format: config.json's quantization_config has
// quant_method "kiln"; Kiln loads it, transformers does not).
void export_hf(const std::string& source, const std::string& out, const std::string& quantize = "");

}  // namespace kiln::recipes
