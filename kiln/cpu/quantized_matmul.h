// Products with quantized weights (kiln/core/quantized.h) on the CPU, for
// inference. Exposed beside the backend so the tests can run each
// instruction path on whatever machine runs them.
#pragma once
#include "kiln/core/quantized.h"

namespace kiln::cpu {

// The integer dot products: AVX-512 VNNI's vpdpbusd, AVX2's
// vpmaddubsw + vpmaddwd, or plain C++ (the reference the tests hold the
// other two to, bit for bit).
enum class QuantDot { scalar, avx2, avx512_vnni };
// The path the backend takes on this CPU under KILN_MAX_ISA.
QuantDot quant_dot_in_use();
const char* quant_dot_name(QuantDot dot);

// out [M, N] f32 = x [M, K] f32 (contiguous) times w^T, w [N, K]: each row of
// x quantized to int8 per block of 32 (ggml's Q8_0), integer products per
// block, f32 sums in a fixed order (the result does not depend on the thread
// count or the path).
void quantized_matmul_rows(const float* x, int64_t M, const QuantizedMatrix& w, float* out, QuantDot dot);

// Below this many rows the integer kernel runs; from it on, the weights are
// widened to f32 once per call and the product is one SGEMM (prompts), on
// the activations rounded as the integer kernel rounds them. The crossover,
// measured on Zen 4 at 2 threads for a 1,536 x 576 matrix, with the kernel
// taking four activation rows per weight block: at 32 rows the integer
// kernel takes 317 us (int8) and 438 us (int4) against widening's 477 and
// 764; at 64, 650 and 882 against 796 and 945; at 128 widening wins int4.
constexpr int64_t kWidenedRows = 64;

}  // namespace kiln::cpu
