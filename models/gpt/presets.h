// Named GPT sizes, so the command line, the planner and the tests read the
// same shapes: GPT-2's four (vocab 50257, context 1024) and the small model
// the fortunes recipe trains. `--n-layer` etc. override a preset's fields.
#pragma once
#include <string>
#include <vector>

#include "models/gpt/gpt.h"

namespace kiln::models {

// gpt2 (124M), gpt2-medium (350M), gpt2-large (774M), gpt2-xl (1.5B),
// fortunes (4 layers, 128 wide, context 128; its vocab comes from the
// tokenizer). Throws listing the names for an unknown one.
GptConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();
// Parameters with tied input/output embeddings (what GPT-2's counts use).
int64_t gpt_parameter_count(const GptConfig& c);
// Training FLOPs per token (forward + backward) of each block, the cost
// model of `kiln plan` (6 per multiplying weight, plus 12 T d for attention
// per layer). The tied head and its loss (6 V d) count with the last block,
// the embedding lookups (free) with the first: their stages always hold
// them. Pipeline stages are balanced by these costs.
std::vector<double> gpt_block_flops(const GptConfig& c);

}  // namespace kiln::models
