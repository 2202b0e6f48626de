// A training step of a Hugging Face language model, from its config.json
// alone: what `kiln plan --model hf:DIR` runs on the meta device to predict
// memory (the model is built there; no weights are read).
#pragma once
#include <nlohmann/json.hpp>

#include "apps/recipes/step_parts.h"

namespace kiln::recipes {

// Sequences of `seq_len` tokens; request.checkpointing: none or blocks;
// request.lora: adapters on a frozen base (no targets: peft's for the model type).
StepParts hf_step_parts(const nlohmann::json& config, const StepRequest& request, int64_t seq_len);

}  // namespace kiln::recipes
