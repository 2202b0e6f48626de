// An f32 GEMM whose second operand is packed, and widened as it is packed,
// from f32, bf16 or f16: GotoBLAS's and BLIS's blocking (a register tile of
// c, a panel of b in L1, a block of a in L2), written here for the 16-bit
// weights of a prompt's products where the CPU has no fast product of that
// type. Its tiles: 4 x 24 in 256-bit registers (AVX2), 8 x 48 in 512-bit
// ones (AVX-512).
//
// Why not oneDNN: its f32 GEMM takes b in f32, so a 16-bit weight had to be
// widened into a buffer a panel at a time first, and each panel's call
// packed all of a again. A 512-token prompt of TinyLlama's shape in f16 then
// ran slower than the same model in f32 (43 against 50 tokens/s on a Zen 3,
// 2 threads), where llama.cpp's f16 runs 1.4x its f32. Widening while
// packing reads each weight once, at half the f32 bytes.
#pragma once
#include <cstdint>

namespace kiln::cpu {

enum class PackedSource : uint8_t { f32, bf16, f16 };

// c [M, N] = alpha * a [M, K] · b + beta * c (beta 0: c is not read). a rows
// lda apart; c rows ldc apart; b [K, N] with rows ldb apart, or
// (b_transposed) a weight [N, K] with rows ldb apart, its elements of type
// `type`. Runs on Kiln's threads (get_num_threads), in the widest tile the
// ISA in force allows; the sums of each output are in one
// fixed order, whatever the thread count.
void packed_gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda, const void* b,
                 PackedSource type, bool b_transposed, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace kiln::cpu
