// GGUF's quantized tensors as Kiln holds them (kiln/core/quantized.h), all
// exactly: Q8_0 and Q4_0 share Kiln's block of 32 and level layout, so they
// become int8b and int4 matrices (the levels copied out of ggml's blocks,
// each f16 scale widened to f32); Q4_1, Q5_0, Q5_1 and IQ4_NL become q4_1,
// q5_0, q5_1 and iq4_nl (4 and 5 bits a level, with Q4_1's and Q5_1's
// minimum); the K-quants (Q2_K to Q6_K) and IQ4_XS stay the file's blocks
// (views of the mapping, no copy). Dequantized values are what ggml's
// reference dequantize_row_* computes.
#pragma once
#include <cstdint>
#include <optional>

#include "kiln/core/quantized.h"
#include "kiln/io/gguf_parse.h"

namespace kiln {

// Whether a tensor of `type` becomes a Kiln quantized matrix, and which format it becomes.
bool gguf_maps_to_kiln_quantized(GgufType type);
std::optional<QuantFormat> gguf_kiln_format(GgufType type);
// The K-quant format a type's blocks are multiplied as; none for the others.
std::optional<QuantFormat> k_quant_format(GgufType type);
// `blocks`: a [rows, cols] tensor's bytes, as GgufFile::tensor gives them (u8 [rows, bytes per row]).
QuantizedMatrix gguf_to_quantized(GgufType type, const Tensor& blocks, int64_t rows, int64_t cols, DType dtype);
// `count` values (a multiple of the type's block) from their blocks; F32, F16 and BF16 too.
void gguf_dequantize(GgufType type, const uint8_t* blocks, int64_t count, float* out);

}  // namespace kiln
