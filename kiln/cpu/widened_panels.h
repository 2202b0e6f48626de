// A product whose second operand is stored in 16 bits (bf16, or f16 from a
// GGUF file) on a CPU without fast products of that type: the matrix is
// widened to f32 a panel of columns at a time into a buffer each thread
// keeps, and the f32 GEMM multiplies each panel. Staging b whole wrote twice
// its bytes to fresh memory every call: a 512-token bf16 prompt of
// TinyLlama's shape spent 38% of its time in those copies. Without AVX-512
// the product is packed_gemm's instead (packed_gemm.h), which widens b as it
// packs it: oneDNN packed all of a again for each panel.
#pragma once
#include <cstdint>

namespace kiln::cpu {

enum class Wide16 : uint8_t { bf16, f16 };

// c [M, N] = alpha * a [M, K] · b + beta * c: a and c contiguous f32; b
// [K, N] with rows ldb apart, or (b_transposed) a weight [N, K] with rows
// ldb apart.
void gemm_widening_panels(int64_t M, int64_t N, int64_t K, float alpha, const float* a, const uint16_t* b,
                          bool b_transposed, int64_t ldb, Wide16 type, float beta, float* c);

}  // namespace kiln::cpu
