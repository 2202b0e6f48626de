#include "kiln/cpu/packed_gemm.h"

#include <algorithm>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/core/dtype.h"
#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {
namespace {

// The register tile: 4 rows x 24 columns, 12 accumulators of the 16 ymm
// registers (three hold b's row, one a's broadcast element). A 6 x 16 tile
// broadcasts 6 elements of a for its 12 products, not 4, and ran at 0.9x
// this one on a Zen 3 (both in L1).
constexpr int64_t kMr = 4, kNr = 24;
// a is packed once, by the whole team, kPackedA floats (16 MB) at most at a
// time. A task is kChunk columns: their b slice (kKc x kChunk) is packed
// once per depth block and serves every row; kKc x kNr of b (24 KB) stays in
// L1 while a's kMc x kKc block passes it. The sizes are measured, not
// derived: on a Zen 3, 192 columns and 72 rows ran TinyLlama's three shapes
// of product (512 rows) 1.06x (1 thread) and 1.10x (2) the 96 x 144 the
// cache sizes suggest.
constexpr int64_t kKc = 256, kMc = 72, kChunk = 192, kPackedA = int64_t(1) << 22;

// Eight elements of b as f32, and one.
template <PackedSource S>
__m256 load8(const void* p, int64_t i) {
  if constexpr (S == PackedSource::f32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else if constexpr (S == PackedSource::f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
  } else {
    return widen_bf16x8(static_cast<const uint16_t*>(p) + i);
  }
}
template <PackedSource S>
float load1(const void* p, int64_t i) {
  if constexpr (S == PackedSource::f32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return S == PackedSource::f16 ? f16_to_float(h) : bf16_to_float(h);
}

// r[0..7] transposed in place: r[j] lane i <- r[i] lane j.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// b's columns [n0, n0 + nr) and depths [k0, k0 + kc) as kc rows of kNr f32
// (columns past nr zero): bp[k * kNr + j] = b(k0 + k, n0 + j).
template <PackedSource S>
void pack_b(const void* b, bool transposed, int64_t ldb, int64_t k0, int64_t kc, int64_t n0, int64_t nr, float* bp) {
  if (!transposed) {  // b [K, N]: each depth's kNr columns are contiguous
    for (int64_t k = 0; k < kc; ++k) {
      const int64_t row = (k0 + k) * ldb + n0;
      float* out = bp + k * kNr;
      if (nr == kNr) {
        for (int64_t j = 0; j < kNr; j += 8) _mm256_storeu_ps(out + j, load8<S>(b, row + j));
      } else {
        for (int64_t j = 0; j < kNr; ++j) out[j] = j < nr ? load1<S>(b, row + j) : 0.0f;
      }
    }
    return;
  }
  // A weight [N, K]: each column is a row of the weight, so 8 x 8 blocks are
  // read along the rows and transposed in registers.
  for (int64_t group = 0; group < kNr; group += 8) {
    const int64_t rows = std::clamp<int64_t>(nr - group, 0, 8);
    int64_t k = 0;
    if (rows == 8)
      for (; k + 8 <= kc; k += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = load8<S>(b, (n0 + group + i) * ldb + k0 + k);
        transpose8(r);
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(bp + (k + i) * kNr + group, r[i]);
      }
    for (; k < kc; ++k)
      for (int64_t i = 0; i < 8; ++i)
        bp[k * kNr + group + i] = i < rows ? load1<S>(b, (n0 + group + i) * ldb + k0 + k) : 0.0f;
  }
}

// a's rows [m0, m0 + mr) and depths [k0, k0 + kc) as kc columns of kMr
// (rows past mr zero): ap[k * kMr + i] = a(m0 + i, k0 + k). Eight depths at a
// time are transposed in registers.
static_assert(kMr == 4, "pack_a stores a column as one 128-bit vector");
void pack_a(const float* a, int64_t lda, int64_t m0, int64_t mr, int64_t k0, int64_t kc, float* ap) {
  int64_t k = 0;
  if (mr == kMr)
    for (; k + 8 <= kc; k += 8) {
      __m256 r[8];
      for (int i = 0; i < kMr; ++i) {
        const float* row = a + (m0 + i) * lda + k0 + k;
        _mm_prefetch(reinterpret_cast<const char*>(row + 64), _MM_HINT_T0);  // a's rows are far apart: no stream
        r[i] = _mm256_loadu_ps(row);
      }
      for (int i = kMr; i < 8; ++i) r[i] = _mm256_setzero_ps();
      transpose8(r);
      for (int j = 0; j < 8; ++j) _mm_storeu_ps(ap + (k + j) * kMr, _mm256_castps256_ps128(r[j]));
    }
  for (; k < kc; ++k)
    for (int64_t i = 0; i < kMr; ++i) ap[k * kMr + i] = i < mr ? a[(m0 + i) * lda + k0 + k] : 0.0f;
}

// c's tile [mr, nr] = alpha * ap · bp + beta * c (beta 0: c not read).
void tile(int64_t kc, const float* ap, const float* bp, float alpha, float beta, float* c, int64_t ldc, int64_t mr,
          int64_t nr) {
  // c's lines are fetched while the products run: its rows are far apart
  // (a row of c each 4-8 KB), and each missed store stalled the tile.
  for (int64_t i = 0; i < mr; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + nr / 2), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + nr - 1), _MM_HINT_T0);
  }
  // Twelve named accumulators: GCC spills an array of them to the stack on
  // every step.
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00, c20 = c00, c21 = c00,
         c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  // Unrolled: the loop's own counter and pointer updates cost a Zen 3 12%
  // of the tile's speed in L1 (88 against 77 GFLOP/s on one core).
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k, ap += kMr, bp += kNr) {
    const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8), b2 = _mm256_loadu_ps(bp + 16);
    __m256 ai = _mm256_broadcast_ss(ap);
    c00 = _mm256_fmadd_ps(ai, b0, c00), c01 = _mm256_fmadd_ps(ai, b1, c01), c02 = _mm256_fmadd_ps(ai, b2, c02);
    ai = _mm256_broadcast_ss(ap + 1);
    c10 = _mm256_fmadd_ps(ai, b0, c10), c11 = _mm256_fmadd_ps(ai, b1, c11), c12 = _mm256_fmadd_ps(ai, b2, c12);
    ai = _mm256_broadcast_ss(ap + 2);
    c20 = _mm256_fmadd_ps(ai, b0, c20), c21 = _mm256_fmadd_ps(ai, b1, c21), c22 = _mm256_fmadd_ps(ai, b2, c22);
    ai = _mm256_broadcast_ss(ap + 3);
    c30 = _mm256_fmadd_ps(ai, b0, c30), c31 = _mm256_fmadd_ps(ai, b1, c31), c32 = _mm256_fmadd_ps(ai, b2, c32);
  }
  const __m256 acc[kMr][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32}};
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  if (mr == kMr && nr == kNr) {
    for (int i = 0; i < kMr; ++i)
      for (int h = 0; h < 3; ++h) {
        float* out = c + i * ldc + h * 8;
        const __m256 v = _mm256_mul_ps(va, acc[i][h]);
        _mm256_storeu_ps(out, beta == 0.0f ? v : _mm256_fmadd_ps(vb, _mm256_loadu_ps(out), v));
      }
    return;
  }
  alignas(32) float sums[kMr][kNr];
  for (int i = 0; i < kMr; ++i)
    for (int h = 0; h < 3; ++h) _mm256_store_ps(sums[i] + h * 8, acc[i][h]);
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      float& out = c[i * ldc + j];
      out = alpha * sums[i][j] + (beta == 0.0f ? 0.0f : beta * out);
    }
}

struct Problem {
  int64_t K;
  float alpha;
  const float* a;  // (at the row block's first row)
  int64_t lda;
  const void* b;
  bool b_transposed;
  int64_t ldb;
  float beta;
  float* c;  // (at the row block's first row)
  int64_t ldc;
};

// One task: c's rows [m0, m1) (from the row block's first, m0 a multiple of
// kMr) and columns [n0, n1) of at most kChunk, from a packed ap (each depth
// block's panels, rows_padded x kc, one after another). b's slice is packed
// once per depth block and serves every row.
template <PackedSource S>
void task(const Problem& p, const float* ap, int64_t rows_padded, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  thread_local std::vector<float> b_kept;
  b_kept.resize(size_t(kKc * kChunk));
  float* bp = b_kept.data();
  const int64_t nc = n1 - n0;
  for (int64_t pc = 0; pc < p.K; pc += kKc) {
    const int64_t kc = std::min(kKc, p.K - pc);
    const float beta = pc == 0 ? p.beta : 1.0f;  // (the first depth block applies beta; later ones add)
    for (int64_t jr = 0; jr < nc; jr += kNr)
      pack_b<S>(p.b, p.b_transposed, p.ldb, pc, kc, n0 + jr, std::min(kNr, nc - jr), bp + jr * kc);
    const float* slice = ap + pc * rows_padded;
    for (int64_t ic = m0; ic < m1; ic += kMc) {
      const int64_t mc = std::min(kMc, m1 - ic);
      for (int64_t jr = 0; jr < nc; jr += kNr)
        for (int64_t ir = 0; ir < mc; ir += kMr)
          tile(kc, slice + (ic + ir) * kc, bp + jr * kc, p.alpha, beta, p.c + (ic + ir) * p.ldc + n0 + jr, p.ldc,
               std::min(kMr, mc - ir), std::min(kNr, nc - jr));
    }
  }
}

template <PackedSource S>
void run(int64_t M, int64_t N, const Problem& whole, int threads) {
  const int64_t K = whole.K, depth_blocks = (K + kKc - 1) / kKc;
  const int64_t block_rows = std::max(kMr, kPackedA / K / kMr * kMr);
  thread_local std::vector<float> a_kept;  // (the caller's: one packed a for the team)
  a_kept.resize(size_t((std::min(M, block_rows) + kMr - 1) / kMr * kMr * K));
  float* ap = a_kept.data();
  const int64_t chunks = (N + kChunk - 1) / kChunk;
#pragma omp parallel num_threads(threads) if (threads > 1)
  for (int64_t r0 = 0; r0 < M; r0 += block_rows) {
    const int64_t rows = std::min(block_rows, M - r0), rows_padded = (rows + kMr - 1) / kMr * kMr;
    const int64_t panels = rows_padded / kMr;
    Problem p = whole;
    p.a += r0 * p.lda;
    p.c += r0 * p.ldc;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < panels * depth_blocks; ++t) {
      const int64_t panel = t % panels, pc = t / panels * kKc, kc = std::min(kKc, K - pc);
      pack_a(p.a, p.lda, panel * kMr, std::min(kMr, rows - panel * kMr), pc, kc,
             ap + pc * rows_padded + panel * kMr * kc);
    }
    // Tasks are taken as threads come free: on a shared machine one thread
    // often runs slower, and a fixed split waited for it. Where there are
    // few columns, the rows are split too.
    const int64_t groups = std::clamp<int64_t>(2 * threads / chunks, 1, panels);
    const int64_t group_rows = (panels + groups - 1) / groups * kMr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < chunks * groups; ++t) {
      const int64_t n0 = t % chunks * kChunk, m0 = t / chunks * group_rows;
      if (m0 < rows) task<S>(p, ap, rows_padded, m0, std::min(rows, m0 + group_rows), n0, std::min(N, n0 + kChunk));
    }
  }
}

}  // namespace

void packed_gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda, const void* b,
                 PackedSource type, bool b_transposed, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // an empty sum: c = beta * c
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  const Problem p{K, alpha, a, lda, b, b_transposed, ldb, beta, c, ldc};
  const int threads = M * N * K < (int64_t(1) << 21) ? 1 : get_num_threads();  // (Kiln's count, as every loop's)
  if (type == PackedSource::f16) return run<PackedSource::f16>(M, N, p, threads);
  if (type == PackedSource::bf16) return run<PackedSource::bf16>(M, N, p, threads);
  run<PackedSource::f32>(M, N, p, threads);
}

}  // namespace kiln::cpu
