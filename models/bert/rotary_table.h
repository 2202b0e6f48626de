// The cos and sin tables of rotary positions as the encoders with them
// (ModernBERT, NomicBERT) compute them: rotate_half's layout, each
// frequency twice (cat(freqs, freqs)), for ops' rotary().
#pragma once
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln::models {

// cos and sin [T, D] of positions [0, T) at base `theta`.
std::pair<Tensor, Tensor> rotary_table(int64_t T, int64_t D, double theta, Device device);
// Refuses a width that does not split into `heads` heads of even width (rotation turns pairs), naming `model`.
void check_rotary_heads(int64_t hidden, int64_t heads, const char* model);

}  // namespace kiln::models
