// Products with ggml's K-quants (Q2_K-Q6_K) and IQ4_XS (kiln/core/quantized_k.h)
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
// scale; the tests' reference).
void round_to_q8k_levels(const float* x, int64_t M, int64_t K, float* out);

// The values each scale (and minimum) covers: 16 in Q2_K, Q3_K and Q6_K,
// else 32 (the K-quants' and IQ4_XS's sub-blocks; every other format's blocks).
constexpr int64_t sub_block_values(QuantFormat f) {
  return f == QuantFormat::q2_k || f == QuantFormat::q3_k || f == QuantFormat::q6_k ? 16 : 32;
}
// Row n of a K-quant matrix as signed levels with, per sub-block, an f32
// scale and (Q2_K, Q4_K, Q5_K) minimum: value = scale * level + minimum.
// What the prompt GEMM (quantized_gemm.h) multiplies.
void kquant_row_levels(const QuantizedMatrix& w, int64_t n, int8_t* levels, float* scales, float* mins);

}  // namespace kiln::cpu
