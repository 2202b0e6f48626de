// GGUF's quantized tensors as Kiln holds them. Q8_0 and Q4_0 share Kiln's
// block of 32 and its level layout (kiln/core/quantized.h), so they become
// int8b and int4 matrices exactly: the levels copied out of ggml's blocks,
// each f16 scale widened to f32. Every other type ggml defines and Kiln
// reads (Q4_1, Q5_0, Q5_1, the K-quants Q2_K to Q6_K) is dequantized to f32
// values, as ggml's reference dequantize_row_* computes them.
#pragma once
#include <cstdint>
#include <optional>

#include "kiln/core/quantized.h"
#include "kiln/io/gguf_parse.h"

namespace kiln {

// Whether a tensor of `type` becomes a Kiln quantized matrix (Q8_0, Q4_0).
bool gguf_maps_to_kiln_quantized(GgufType type);
// `blocks`: a [rows, cols] tensor's bytes (rows * cols / 32 blocks of Q8_0 or Q4_0).
QuantizedMatrix gguf_to_quantized(GgufType type, const uint8_t* blocks, int64_t rows, int64_t cols, DType dtype);
// `count` values (a multiple of the type's block) from their blocks; F32, F16 and BF16 too.
void gguf_dequantize(GgufType type, const uint8_t* blocks, int64_t count, float* out);

}  // namespace kiln
