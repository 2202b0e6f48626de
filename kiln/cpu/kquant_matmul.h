// Products with ggml's K-quants (Q4_K, Q5_K, Q6_K: kiln/core/quantized_k.h)
// on the CPU, activations quantized per 256 as llama.cpp's Q8_K. What
// quantized_matmul_rows runs for those formats.
#pragma once
#include "kiln/core/quantized.h"
#include "kiln/cpu/quantized_matmul.h"

namespace kiln::cpu {

// out [M, N] f32 = x [M, K] f32 (contiguous) times w^T, w [N, K] a K-quant
// matrix; the same bits on every path and thread count.
void kquant_matmul_rows(const float* x, int64_t M, const QuantizedMatrix& w, float* out, QuantDot dot);
// x's rows as the K-quant kernel sees them (each level times its block's
// scale): what a prompt's widened product multiplies.
void round_to_q8k_levels(const float* x, int64_t M, int64_t K, float* out);

}  // namespace kiln::cpu
