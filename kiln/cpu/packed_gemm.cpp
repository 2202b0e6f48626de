#include "kiln/cpu/packed_gemm.h"

#include <algorithm>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/core/dtype.h"
#include "kiln/cpu/isa.h"
#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {
namespace {

// The register tiles and their blocking. A task is kChunk columns (or
// fewer, run() says when): their b slice (kKc deep) is packed once per
// depth block and serves every row; kKc x kNr of b stays in L1 while a's
// kMc x kKc block passes it. a is packed once, by the whole team, kPackedA
// floats (16 MB) at most at a time. The sizes are measured, not derived.
//
// AVX2: 4 rows x 24 columns, 12 accumulators of the 16 ymm registers (three
// hold b's row, one a's broadcast element). A 6 x 16 tile broadcasts 6
// elements of a for its 12 products, not 4, and ran at 0.9x this one on a
// Zen 3 (both in L1). 192 columns and 72 rows ran TinyLlama's three shapes of
// product (512 rows) 1.06x (1 thread) and 1.10x (2) the 96 x 144 the cache
// sizes suggest.
struct Avx2Tile {
  static constexpr int64_t kMr = 4, kNr = 24, kKc = 256, kMc = 72, kChunk = 192;
  static void multiply(int64_t kc, const float* ap, const float* bp, float alpha, float beta, float* c, int64_t ldc,
                       int64_t mr, int64_t nr);
};
// AVX-512: 8 rows x 48 columns, 24 accumulators of the 32 zmm registers
// (three hold b's row, one a's broadcast element), the shape of oneDNN's
// own f32 kernel (48 x 8, its operands the other way round). The AVX2
// tile's blocking served it as well as 128 x 96, 128 x 48, 384 x 48 and
// 256 x 144 (depth x rows) did, within the noise of a Xeon VM with AMX.
struct Avx512Tile {
  static constexpr int64_t kMr = 8, kNr = 48, kKc = 256, kMc = 72, kChunk = 192;
  [[gnu::target("avx512f")]] static void multiply(int64_t kc, const float* ap, const float* bp, float alpha, float beta,
                                                  float* c, int64_t ldc, int64_t mr, int64_t nr);
};
constexpr int64_t kPackedA = int64_t(1) << 22;

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

// b's columns [n0, n0 + nr) and depths [k0, k0 + kc) as kc rows of T::kNr
// f32 (columns past nr zero): bp[k * kNr + j] = b(k0 + k, n0 + j).
template <class T, PackedSource S>
void pack_b(const void* b, bool transposed, int64_t ldb, int64_t k0, int64_t kc, int64_t n0, int64_t nr, float* bp) {
  constexpr int64_t kNr = T::kNr;
  static_assert(kNr % 8 == 0, "b is packed 8 columns at a time");
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

// a's rows [m0, m0 + mr) and depths [k0, k0 + kc) as kc columns of T::kMr
// (rows past mr zero): ap[k * kMr + i] = a(m0 + i, k0 + k). Eight depths at a
// time are transposed in registers.
template <class T>
void pack_a(const float* a, int64_t lda, int64_t m0, int64_t mr, int64_t k0, int64_t kc, float* ap) {
  constexpr int64_t kMr = T::kMr;
  static_assert(kMr == 4 || kMr == 8, "a column is stored as one 128- or 256-bit vector");
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
      for (int j = 0; j < 8; ++j) {
        if constexpr (kMr == 8) {
          _mm256_storeu_ps(ap + (k + j) * kMr, r[j]);
        } else {
          _mm_storeu_ps(ap + (k + j) * kMr, _mm256_castps256_ps128(r[j]));
        }
      }
    }
  for (; k < kc; ++k)
    for (int64_t i = 0; i < kMr; ++i) ap[k * kMr + i] = i < mr ? a[(m0 + i) * lda + k0 + k] : 0.0f;
}

// c's lines are fetched while the products run: its rows are far apart (a
// row of c each 4-8 KB), and each missed store stalled the tile.
inline void prefetch_c(float* c, int64_t ldc, int64_t mr, int64_t nr) {
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; j += 16) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + j), _MM_HINT_T0);
  for (int64_t i = 0; i < mr; ++i) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + nr - 1), _MM_HINT_T0);
}

// c's partial tile [mr, nr] = alpha * sums + beta * c (beta 0: c not read).
template <int64_t kNr>
void store_partial(const float* sums, float alpha, float beta, float* c, int64_t ldc, int64_t mr, int64_t nr) {
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      float& out = c[i * ldc + j];
      out = alpha * sums[i * kNr + j] + (beta == 0.0f ? 0.0f : beta * out);
    }
}

// c's tile [mr, nr] = alpha * ap · bp + beta * c (beta 0: c not read).
void Avx2Tile::multiply(int64_t kc, const float* ap, const float* bp, float alpha, float beta, float* c, int64_t ldc,
                        int64_t mr, int64_t nr) {
  prefetch_c(c, ldc, mr, nr);
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
  if (mr == kMr && nr == kNr) {
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int i = 0; i < kMr; ++i)
      for (int h = 0; h < 3; ++h) {
        float* out = c + i * ldc + h * 8;
        const __m256 v = _mm256_mul_ps(va, acc[i][h]);
        _mm256_storeu_ps(out, beta == 0.0f ? v : _mm256_fmadd_ps(vb, _mm256_loadu_ps(out), v));
      }
    return;
  }
  alignas(32) float sums[kMr * kNr];
  for (int i = 0; i < kMr; ++i)
    for (int h = 0; h < 3; ++h) _mm256_store_ps(sums + i * kNr + h * 8, acc[i][h]);
  store_partial<kNr>(sums, alpha, beta, c, ldc, mr, nr);
}

void Avx512Tile::multiply(int64_t kc, const float* ap, const float* bp, float alpha, float beta, float* c, int64_t ldc,
                          int64_t mr, int64_t nr) {
  prefetch_c(c, ldc, mr, nr);
  // An array, unlike the AVX2 tile's: with every index a constant after
  // unrolling, GCC keeps all 24 in registers here (checked in the assembly).
  __m512 acc[kMr][3];
#pragma GCC unroll 8
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = acc[i][2] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k, ap += kMr, bp += kNr) {
    const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16), b2 = _mm512_loadu_ps(bp + 32);
#pragma GCC unroll 8
    for (int i = 0; i < kMr; ++i) {
      const __m512 ai = _mm512_set1_ps(ap[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(ai, b2, acc[i][2]);
    }
  }
  if (mr == kMr && nr == kNr) {
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
    for (int i = 0; i < kMr; ++i)
#pragma GCC unroll 3
      for (int h = 0; h < 3; ++h) {
        float* out = c + i * ldc + h * 16;
        const __m512 v = _mm512_mul_ps(va, acc[i][h]);
        _mm512_storeu_ps(out, beta == 0.0f ? v : _mm512_fmadd_ps(vb, _mm512_loadu_ps(out), v));
      }
    return;
  }
  alignas(64) float sums[kMr * kNr];
#pragma GCC unroll 8
  for (int i = 0; i < kMr; ++i)
#pragma GCC unroll 3
    for (int h = 0; h < 3; ++h) _mm512_store_ps(sums + i * kNr + h * 16, acc[i][h]);
  store_partial<kNr>(sums, alpha, beta, c, ldc, mr, nr);
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
// kMr) and columns [n0, n1), from a packed ap (each depth
// block's panels, rows_padded x kc, one after another). b's slice is packed
// once per depth block and serves every row.
template <class T, PackedSource S>
void task(const Problem& p, const float* ap, int64_t rows_padded, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  thread_local std::vector<float> b_kept;
  b_kept.resize(size_t(T::kKc * ((n1 - n0 + T::kNr - 1) / T::kNr * T::kNr)));  // (whole tiles, zero-padded)
  float* bp = b_kept.data();
  const int64_t nc = n1 - n0;
  for (int64_t pc = 0; pc < p.K; pc += T::kKc) {
    const int64_t kc = std::min(T::kKc, p.K - pc);
    const float beta = pc == 0 ? p.beta : 1.0f;  // (the first depth block applies beta; later ones add)
    for (int64_t jr = 0; jr < nc; jr += T::kNr)
      pack_b<T, S>(p.b, p.b_transposed, p.ldb, pc, kc, n0 + jr, std::min(T::kNr, nc - jr), bp + jr * kc);
    const float* slice = ap + pc * rows_padded;
    for (int64_t ic = m0; ic < m1; ic += T::kMc) {
      const int64_t mc = std::min(T::kMc, m1 - ic);
      for (int64_t jr = 0; jr < nc; jr += T::kNr)
        for (int64_t ir = 0; ir < mc; ir += T::kMr)
          T::multiply(kc, slice + (ic + ir) * kc, bp + jr * kc, p.alpha, beta, p.c + (ic + ir) * p.ldc + n0 + jr, p.ldc,
                      std::min(T::kMr, mc - ir), std::min(T::kNr, nc - jr));
    }
  }
}

template <class T, PackedSource S>
void run(int64_t M, int64_t N, const Problem& whole, int threads) {
  constexpr int64_t kMr = T::kMr, kKc = T::kKc, kChunk = T::kChunk;
  const int64_t K = whole.K, depth_blocks = (K + kKc - 1) / kKc;
  const int64_t block_rows = std::max(kMr, kPackedA / K / kMr * kMr);
  thread_local std::vector<float> a_kept;  // (the caller's: one packed a for the team)
  a_kept.resize(size_t((std::min(M, block_rows) + kMr - 1) / kMr * kMr * K));
  float* ap = a_kept.data();
  // Column tasks of kChunk; where their count is not a multiple of the
  // threads, narrower ones of whole tiles, spread over the next multiple as
  // far as the tiles divide: 576 columns in three tasks of 192 left one of
  // two threads idle for a third of the product (four of 144 do not).
  const int64_t tiles = (N + T::kNr - 1) / T::kNr, full = (N + kChunk - 1) / kChunk;
  const int64_t tasks = std::min(tiles, (full + threads - 1) / threads * threads);
  const int64_t width = full % threads == 0 ? kChunk : (tiles + tasks - 1) / tasks * T::kNr;
  const int64_t chunks = (N + width - 1) / width;
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
      pack_a<T>(p.a, p.lda, panel * kMr, std::min(kMr, rows - panel * kMr), pc, kc,
                ap + pc * rows_padded + panel * kMr * kc);
    }
    // Tasks are taken as threads come free: on a shared machine one thread
    // often runs slower, and a fixed split waited for it. Where there are
    // few columns, the rows are split too.
    const int64_t groups = std::clamp<int64_t>(2 * threads / chunks, 1, panels);
    const int64_t group_rows = (panels + groups - 1) / groups * kMr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < chunks * groups; ++t) {
      const int64_t n0 = t % chunks * width, m0 = t / chunks * group_rows;
      if (m0 < rows) task<T, S>(p, ap, rows_padded, m0, std::min(rows, m0 + group_rows), n0, std::min(N, n0 + width));
    }
  }
}

template <class T>
void run_tile(int64_t M, int64_t N, const Problem& p, PackedSource type, int threads) {
  if (type == PackedSource::f16) return run<T, PackedSource::f16>(M, N, p, threads);
  if (type == PackedSource::bf16) return run<T, PackedSource::bf16>(M, N, p, threads);
  run<T, PackedSource::f32>(M, N, p, threads);
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
  if (isa_allows(Isa::avx512)) return run_tile<Avx512Tile>(M, N, p, type, threads);
  run_tile<Avx2Tile>(M, N, p, type, threads);
}

}  // namespace kiln::cpu
