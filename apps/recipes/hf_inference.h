// Hugging Face folders served by `kiln serve --model NAME=hf:DIR`: causal
// language models answer completions, BERT-family classifiers /v1/classify.
#pragma once
#include "apps/recipes/recipe.h"
#include "models/hf/hf_model.h"

namespace kiln::recipes {

// `spec`: hf:DIR, gguf:FILE, ollama:NAME (with its Modelfile's defaults),
// or a bare folder or file. options.chat_template: a family's name
// (--chat-template), else the folder's own template is used for chat, if it
// has one; options.quantize quantizes a language model's weights.
LoadedModel load_hf_for_inference(const std::string& spec, Device device, const InferenceOptions& options = {});

// A loaded language model (a fine-tuned one) served as a folder's is.
std::unique_ptr<InferenceModel> hf_language_model_inference(models::HfCausalLm lm, const std::string& chat_template = "");

}  // namespace kiln::recipes
