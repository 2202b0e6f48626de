// Qwen3-Reranker as its Hugging Face folder ships: a causal language model
// (Qwen3ForCausalLM) asked whether a document answers a query, scored by
// its last token's probability of "yes" against "no" (its model card's
// code). Nothing in config.json says so; as llama.cpp's converter does, the
// folder's README heading or its name does ("Qwen3-Reranker"). Its prompt
// is the one that converter writes as tokenizer.chat_template.rerank, so
// the folder and its GGUF file score alike (models/hf/hf_model.h's
// HfClassifier.rerank_prompt).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace kiln::models {

// Whether `dir` (a folder whose config.json is `config`) holds Qwen3-Reranker.
bool is_qwen3_reranker_folder(const std::string& dir, const nlohmann::json& config);

// Its prompt, {query} and {document} in it; the labels its head reads from the output rows of.
extern const char* const kQwen3RerankPrompt;
extern const char* const kQwen3RerankLabels[2];  // "yes", "no"

}  // namespace kiln::models
