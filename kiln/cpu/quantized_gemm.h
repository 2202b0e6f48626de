// A prompt's product with quantized weights on the CPU: an integer GEMM
// over groups of interleaved weight rows (quantized_gemm.cpp), for every
// format, where decoding's few rows take quantized_matmul_rows.
#pragma once
#include "kiln/core/quantized.h"
#include "kiln/cpu/quantized_matmul.h"

namespace kiln::cpu {

// out [M, N] f32 = x [M, K] f32 (contiguous) times w^T, w [N, K]: x
// quantized per block of 32 as the decoding kernel quantizes it, exact
// integer sums per weight sub-block, f32 sums in a fixed order (the same
// bits on every path and thread count; equal to the decoding kernel's up to
// the order of the f32 sums).
void quantized_gemm(const float* x, int64_t M, const QuantizedMatrix& w, float* out, QuantDot dot);

}  // namespace kiln::cpu
