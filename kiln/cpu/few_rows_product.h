// Products of a few rows with a bf16 weight matrix, for decoding: a step
// multiplies one row per sequence by every weight, so it is bound by reading
// the weights. This kernel reads each bf16 weight once, at its 2 bytes,
// widening it in registers; staging the matrix as f32 for SGEMM (what a CPU
// without fast bf16 products did before) moved 2 + 4 + 4 bytes a weight, and
// decoded a bf16 model at a quarter of its f32 speed.
#pragma once
#include <cstdint>

namespace kiln::cpu {

// c [M, N] = alpha * a [M, K] · w^T + beta * c: a f32 rows lda apart, w [N, K]
// bf16 rows ldw apart (a Linear's weight), c f32 rows ldc apart. Each output
// is a sum over k in 32 lanes (lane t takes k = t mod 32, in k order, with
// fused multiply-adds), then a fixed tree over the lanes: one thread
// computes it, so the result depends neither on the thread count, nor on M,
// nor on the instruction set.
void few_rows_times_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
                         const uint16_t* w, int64_t ldw, float beta, float* c, int64_t ldc);

// The same with IEEE f16 weights (a GGUF file's F16 matrices, widened in
// registers by F16C's vcvtph2ps).
void few_rows_times_f16(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda, const uint16_t* w,
                        int64_t ldw, float beta, float* c, int64_t ldc);

// The same with f32 weights, for one or two decoding streams (both rows
// read each weight once): an f32 SmolLM-135M-shaped model decodes at 1.30x
// the tokens/s of oneDNN's SGEMM at 2 threads and at 1.0x at one
// (Emerald Rapids, best of 5 interleaved runs).
void few_rows_times_f32(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda, const float* w,
                        int64_t ldw, float beta, float* c, int64_t ldc);
constexpr int64_t kFewRowsF32 = 2;

// Up to this many rows, bf16 products with a transposed (weight-shaped)
// second operand take few_rows_times_bf16: measured on Zen 3 (AVX2), one
// row reads the weights at memory's speed and 8 rows still beat staging them
// for SGEMM, while 16 do not. Where oneDNN multiplies bf16 natively
// (bf16_gemm_available(): AMX), up to 4: on Emerald Rapids (2 threads,
// 2026-11-28) few rows took 0.4-0.5x oneDNN's time on TinyLlama's MLP
// matrices at 2 rows, 0.9-1.3x at 4 and 1.9-2.8x at 8 (on SmolLM's, oneDNN
// took 7.7 ms a product from 2 rows on, few rows 0.1-0.6 ms); oneDNN also
// allocates on every call, which a batched decoding step then would.
constexpr int64_t kFewRowsBf16 = 8;
constexpr int64_t kFewRowsBf16Native = 4;
// f16 weights the same (widening f16 is one instruction, bf16's two).
constexpr int64_t kFewRowsF16 = kFewRowsBf16;

}  // namespace kiln::cpu
