// Models as Ollama keeps them (`ollama pull NAME`): a manifest per name and
// tag, whose model layer names a GGUF blob by its digest. `ollama:NAME`
// resolves to that file wherever a gguf:FILE is taken. The store is
// $OLLAMA_MODELS, else ~/.ollama/models, else the Linux service's
// /usr/share/ollama/.ollama/models. Names as Ollama parses them:
// [HOST/][NAMESPACE/]MODEL[:TAG], by default registry.ollama.ai, library and
// latest (hf.co/ORG/REPO:Q4_K_M too).
#pragma once
#include <string>

namespace kiln::models {

// The GGUF file of the model `name` (the part after "ollama:"); an error
// says which manifest or blob is missing, or why the model is not one file
// Kiln runs (a LoRA adapter layer).
std::string ollama_model_file(const std::string& name);

}  // namespace kiln::models
