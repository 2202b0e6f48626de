// A model's own sampling defaults, where its files keep them:
// generation_config.json in a Hugging Face folder, general.sampling.* in a
// GGUF file (llama.cpp's convert_hf_to_gguf.py copies one into the other),
// an Ollama Modelfile's params.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "models/common/sampling.h"

namespace kiln::models {

// generation_config.json's temperature, top_k, top_p, min_p and
// repetition_penalty, as vLLM takes them: what differs from transformers'
// GenerationConfig defaults (its top_k of 50 is dropped), do_sample ignored.
// `where` names the file in errors.
SamplingFields generation_config_sampling(const nlohmann::json& generation_config, const std::string& where);
// A GGUF file's general.sampling.*, as llama.cpp applies them: its
// repetition penalty looks at the last penalty_last_n tokens (64 when the
// file does not say).
SamplingFields gguf_sampling(const nlohmann::json& metadata, const std::string& where);
// An Ollama Modelfile's params layer, as `ollama run` applies it: temperature, top_k, top_p, min_p,
// repeat_penalty, repeat_last_n (64 where it is left out), presence_penalty, frequency_penalty; mirostat,
// typical_p and tfs_z named in unapplied when on.
SamplingFields ollama_sampling(const nlohmann::json& params, const std::string& where);

// The general.sampling.* keys for a folder's generation_config.json, as
// convert_hf_to_gguf.py writes them, and back.
nlohmann::json gguf_sampling_metadata(const nlohmann::json& generation_config);
nlohmann::json generation_config_of_gguf_sampling(const nlohmann::json& metadata);

}  // namespace kiln::models
