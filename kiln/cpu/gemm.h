// Row-major GEMM on the CPU, C = alpha * op(A) @ op(B) + beta * C, from the
// library that is fastest for our shapes: oneDNN for f32 (10-35% faster than
// OpenBLAS on the models' GEMMs at 1 and 2 threads, docs/PERFORMANCE.md),
// OpenBLAS for f64 (oneDNN has no f64 GEMM) and for builds without oneDNN.
// Small products run on one thread.
#pragma once
#include <cstdint>

namespace kiln::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// bf16 operands (raw bf16 bits), f32 accumulation and result, through
// oneDNN's matmul primitive (made once per shape). On a CPU with AVX512-BF16
// this runs about twice as fast as the f32 GEMM (docs/PERFORMANCE.md);
// without those instructions oneDNN would emulate it at half the f32 speed,
// so only call it when bf16_gemm_available().
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The same with a bf16 C, rounded once from the f32 sum, after adding the
// optional f32 bias [n] to every row: no f32 copy of C ever exists.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, uint16_t* c, int64_t ldc, const float* bias);
// This build has oneDNN, the CPU has bf16 instructions (KILN_CPU_BF16
// overrides, as for --precision bf16), and oneDNN's bf16 product is faster
// than its f32 one on this kind of CPU (KILN_BF16_GEMM=0 or 1 overrides).
// Where it is not, bf16 operands are widened to f32.
bool bf16_gemm_available();

// Which library runs the f32 GEMMs ("oneDNN" or "OpenBLAS"), for kiln info.
const char* f32_gemm_library();

}  // namespace kiln::cpu
