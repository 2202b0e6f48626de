// ggml's K-quants as Kiln holds them (QuantFormat q4_k, q5_k, q6_k): the
// blocks of a GGUF file as they are, 256 values each (a super-block of
// sub-blocks with 6- or 8-bit scales under one f16 scale), so a Q4_K_M file
// stays 4.5 bits a weight in memory. Read by the products
// (kiln/cpu/kquant_matmul.cpp) and by dequantize_row.
#pragma once
#include <cstdint>

#include "kiln/core/quantized.h"

namespace kiln {

constexpr int64_t kSuperBlock = 256;

// Bytes of one super-block: Q4_K 144, Q5_K 176, Q6_K 210.
int64_t k_block_bytes(QuantFormat format);
// The 256 values of one block.
void dequantize_k_block(QuantFormat format, const uint8_t* block, float* out);
// Q4_K's and Q5_K's eight sub-block scales and minimums (6 bits each, packed in 12 bytes).
void k4_scales_mins(const uint8_t* packed, uint8_t* scales, uint8_t* mins);

}  // namespace kiln
