// Batch-invariant f32 GEMM (kiln/backend/batch_invariant.h): C = alpha *
// op(A) op(B) + beta * C where every element of C is one dot product in one
// fixed order, whatever the number of rows or columns, the tile it falls
// in or the thread count. oneDNN's SGEMM gives no such promise: it picks its
// kernel and its blocking of K by the shape, so a row's bits change with
// the rows batched beside it.
//
// The dot product: eight lanes (AVX2, the build's baseline, so every x86
// machine Kiln runs on gives the same bits), each a chain of fused
// multiply-adds over k = lane, lane + 8, ... (the tail's missing lanes add
// exact zeros), then one fixed tree over the lanes. Tiles of 4 rows by 3
// columns share their loads; a smaller tile runs each element's chain
// unchanged. invariant_dot is the same arithmetic in plain C++, the
// reference the tests hold the kernel to.
#pragma once
#include <cstdint>

namespace kiln::cpu {

void invariant_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// One element: a and b contiguous, k long.
float invariant_dot(const float* a, const float* b, int64_t k);

}  // namespace kiln::cpu
