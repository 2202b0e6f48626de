// Models as Ollama keeps them (`ollama pull NAME`): a manifest per name and
// tag, whose model layer names a GGUF blob by its digest. `ollama:NAME`
// resolves to that file wherever a gguf:FILE is taken. The store is
// $OLLAMA_MODELS, else ~/.ollama/models, else the Linux service's
// /usr/share/ollama/.ollama/models. Names as Ollama parses them:
// [HOST/][NAMESPACE/]MODEL[:TAG], by default registry.ollama.ai, library and
// latest (hf.co/ORG/REPO:Q4_K_M too).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/common/sampling.h"

namespace kiln::models {

// What a manifest adds to its model file, as `ollama run` applies it: the
// params layer (a Modelfile's PARAMETERs: sampling, and stop strings) where
// a request leaves them out, and the system layer (SYSTEM) where a
// conversation opens without a system message.
struct OllamaDefaults {
  SamplingFields sampling;
  std::vector<std::string> stop;
  std::string system;
};
struct OllamaModel {
  std::string file;  // the GGUF blob
  OllamaDefaults defaults;
};

// The GGUF file of the model `name` (the part after "ollama:"); an error
// says which manifest or blob is missing, or why the model is not one file
// Kiln runs (a LoRA adapter layer).
OllamaModel ollama_model(const std::string& name);
std::string ollama_model_file(const std::string& name);

// A params layer's JSON (Ollama's option names: temperature, top_k, top_p,
// min_p, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty,
// stop), checked; samplers Kiln does not run are named in sampling.unapplied,
// and the runner's options (num_ctx, num_thread, ...) are not sampling.
// `where` names the blob in errors.
OllamaDefaults ollama_params(const nlohmann::json& params, const std::string& where);

}  // namespace kiln::models
