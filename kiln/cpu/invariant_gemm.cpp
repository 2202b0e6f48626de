#include "kiln/cpu/invariant_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {

namespace {

constexpr int kLanes = 8;

// The fixed tree over eight lane sums: (0+4 + 2+6) + (1+5 + 3+7).
inline float sum_lanes(const float* l) {
  const float s0 = l[0] + l[4], s1 = l[1] + l[5], s2 = l[2] + l[6], s3 = l[3] + l[7];
  return (s0 + s2) + (s1 + s3);
}

#ifdef KILN_X86_INTRINSICS
inline float sum_lanes(__m256 acc) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}

// C[MR x NR] from rows of A (contiguous along k) and rows of Bt (B's
// columns, contiguous along k).
template <int MR, int NR>
void tile(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t k, float alpha, float beta, float* c,
          int64_t ldc) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t kk = 0;
  for (; kk + kLanes <= k; kk += kLanes) {
    __m256 bv[NR];
    for (int j = 0; j < NR; ++j) bv[j] = _mm256_loadu_ps(bt + j * ldb + kk);
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_loadu_ps(a + i * lda + kk);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  if (kk < k) {
    alignas(32) int32_t lanes[kLanes];
    for (int l = 0; l < kLanes; ++l) lanes[l] = kk + l < k ? -1 : 0;
    const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
    __m256 bv[NR];
    for (int j = 0; j < NR; ++j) bv[j] = _mm256_maskload_ps(bt + j * ldb + kk, mask);
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_maskload_ps(a + i * lda + kk, mask);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float& out = c[i * ldc + j];
      const float dot = alpha * sum_lanes(acc[i][j]);
      out = beta == 0.0f ? dot : dot + beta * out;
    }
}
#else
template <int MR, int NR>
void tile(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t k, float alpha, float beta, float* c,
          int64_t ldc) {
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float& out = c[i * ldc + j];
      const float dot = alpha * invariant_dot(a + i * lda, bt + j * ldb, k);
      out = beta == 0.0f ? dot : dot + beta * out;
    }
}
#endif

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float, float, float*, int64_t);
constexpr int kRows = 4, kCols = 3;
constexpr TileFn kTiles[kRows][kCols] = {{tile<1, 1>, tile<1, 2>, tile<1, 3>},
                                         {tile<2, 1>, tile<2, 2>, tile<2, 3>},
                                         {tile<3, 1>, tile<3, 2>, tile<3, 3>},
                                         {tile<4, 1>, tile<4, 2>, tile<4, 3>}};

// [rows, cols] with leading dimension ld -> its transpose, contiguous.
std::vector<float> transposed(const float* x, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> t(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = x[r * ld + c];
  return t;
}

}  // namespace

float invariant_dot(const float* a, const float* b, int64_t k) {
  float lanes[kLanes] = {};
  for (int64_t kk = 0; kk < k; kk += kLanes)
    for (int l = 0; l < kLanes; ++l)
      if (kk + l < k) lanes[l] = std::fma(a[kk + l], b[kk + l], lanes[l]);
  return sum_lanes(lanes);
}

void invariant_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // Rows of A and columns of B, each contiguous along k.
  std::vector<float> a_rows, b_cols;
  if (trans_a) {
    a_rows = transposed(a, k, m, lda);
    a = a_rows.data();
    lda = k;
  }
  if (!trans_b) {
    b_cols = transposed(b, k, n, ldb);
    b = b_cols.data();
    ldb = k;
  }
  // Column blocks of B (its rows here) stay in cache while every row of A passes them.
  constexpr int64_t kBlock = 48;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool parallel = blocks > 1 && m * n * k > (int64_t(1) << 16) && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j_end = std::min(n, (blk + 1) * kBlock);
    for (int64_t i = 0; i < m; i += kRows) {
      const int64_t mr = std::min<int64_t>(kRows, m - i);
      for (int64_t j = blk * kBlock; j < j_end; j += kCols) {
        const int64_t nr = std::min<int64_t>(kCols, j_end - j);
        kTiles[mr - 1][nr - 1](a + i * lda, lda, b + j * ldb, ldb, k, alpha, beta, c + i * ldc + j, ldc);
      }
    }
  }
}

}  // namespace kiln::cpu
