// llama-server's fill-in-the-middle prompt for /infill (answers.h answers it as /completion does).
#pragma once
#include <cstdint>
#include <vector>

#include "apps/recipes/inference.h"
#include "apps/serve/requests.h"
#include "kiln/text/fim.h"

namespace kiln::serve {

// llama-server's infill prompt (format_prompt_infill), with its batch of 2,048: other files' chunks
// (the repository-level pattern, [FIM_REP]myproject then [FIM_SEP]filename before each, where the model has
// those tokens; else each after a "--- snippet ---" line), as many of the last as fit the context less a batch
// and twice n_predict; then the bos, [FIM_PRE], the prefix's last 1,536 tokens, the prompt, [FIM_SUF], the
// suffix's first tokens up to a quarter batch less the prompt, [FIM_MID].
std::vector<int32_t> infill_prompt(recipes::InferenceModel& model, const text::FimTokens& fim, const InfillRequest& r);

}  // namespace kiln::serve
