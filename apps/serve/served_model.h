// A model kiln serve has loaded, and what answers it: its batcher
// (classifiers, embedders) or its continuous-batching scheduler (language models).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "apps/recipes/inference.h"
#include "apps/recipes/recipe.h"
#include "apps/serve/batcher.h"
#include "apps/serve/generation.h"
#include "apps/serve/ollama_answers.h"

namespace kiln::serve {

struct ServedModel {
  std::string name, dir, recipe;
  std::string loaded_at = ollama_time_now();  // RFC 3339
  int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();  // OpenAI's "created": the Unix time it was loaded
  int64_t weights_bytes = 0;                   // on disk, read once at load (Ollama's size)
  recipes::ModelKind kind;
  int64_t step = 0;
  std::unique_ptr<recipes::InferenceModel> model;
  std::unique_ptr<Batcher> batcher;                // classifiers
  // Held while the model runs for its batcher, or for a request the batcher does not take (/v1/rerank's pairs).
  std::shared_ptr<std::mutex> running = std::make_shared<std::mutex>();
  std::unique_ptr<GenerationScheduler> generator;  // language models
};

}  // namespace kiln::serve
