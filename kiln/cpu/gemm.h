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

// Which library runs the f32 GEMMs ("oneDNN" or "OpenBLAS"), for kiln info.
const char* f32_gemm_library();

}  // namespace kiln::cpu
