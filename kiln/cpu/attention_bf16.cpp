// bf16 attention heads on AVX512-BF16 (see attention_bf16.h; the maths is
// attention.cpp's). vdpbf16ps multiplies 16 pairs of bf16 by 16 pairs and
// adds each lane's two products to an f32 lane, so every product here
// reads its left operand as bf16 pairs (a 32-bit broadcast) and its right
// operand packed so that each 32-bit word holds the pair that meets it:
//   S  = Q K^T    pairs along the head dim: K^T packed as words of K's rows
//   O  = P V      pairs of keys: P's rows as they are, V's rows interleaved
//   dV = P^T dO   pairs of queries: P's and dO's rows interleaved
// Outputs are tiles of 8 rows by 32 columns (16 f32 accumulators), stored
// as f32 (scores) or rounded to bf16 (a head's outputs and gradients).
#include "kiln/cpu/attention_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/x86_intrinsics.h"

#ifdef KILN_X86_INTRINSICS
#define KILN_HAVE_BF16_ATTENTION_KERNELS 1
#define KILN_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,bmi,bmi2")))
#endif

namespace kiln::cpu {

#ifdef KILN_HAVE_BF16_ATTENTION_KERNELS

bool bf16_attention_kernels_apply(int64_t head_size) {
  static const bool have = isa_allows(Isa::avx512_bf16);  // KILN_MAX_ISA caps it (isa.h)
  return have && bf16_attention_kernels_allowed && head_size > 0 && head_size % 16 == 0;
}

namespace {

constexpr int64_t kTileRows = 8, kTileCols = 32;

inline int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// Two adjacent bf16 values as one word, the first in its low half.
inline uint32_t pair_at(const uint16_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// c[r][col] = alpha * sum over p < pairs of the pair at a + r a_row + p a_pair
// dotted with the pair b[p ldb + col], for r < R and col < 16 NV; C is f32,
// or bf16 (Out = uint16_t) for a head's outputs.
template <typename Out, int R, int NV>
KILN_AVX512_BF16 void tile(const uint16_t* a, int64_t a_row, int64_t a_pair, const uint32_t* b, int64_t ldb,
                           int64_t pairs, Out* c, int64_t ldc, float alpha) {
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + p * ldb + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(pair_at(a + r * a_row + p * a_pair)));
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const __m512 x = _mm512_mul_ps(acc[r][v], scale);
      Out* to = c + r * ldc + 16 * v;
      if constexpr (std::is_same_v<Out, float>) _mm512_storeu_ps(to, x);
      else _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), (__m256i)_mm512_cvtneps_pbh(x));
    }
}

template <typename Out>
using TileFn = void (*)(const uint16_t*, int64_t, int64_t, const uint32_t*, int64_t, int64_t, Out*, int64_t, float);
template <typename Out, int R>
constexpr TileFn<Out> tiles_of[2] = {tile<Out, R, 1>, tile<Out, R, 2>};
template <typename Out>
constexpr const TileFn<Out>* tiles[kTileRows] = {tiles_of<Out, 1>, tiles_of<Out, 2>, tiles_of<Out, 3>,
                                                 tiles_of<Out, 4>, tiles_of<Out, 5>, tiles_of<Out, 6>,
                                                 tiles_of<Out, 7>, tiles_of<Out, 8>};

// Rows [0, rows) of C (rows <= kTileRows), columns [0, cols) (a multiple of
// 16), as in `tile`.
template <typename Out>
void product(const uint16_t* a, int64_t a_row, int64_t a_pair, const uint32_t* b, int64_t ldb, int64_t pairs,
             int64_t rows, int64_t cols, Out* c, int64_t ldc, float alpha) {
  for (int64_t c0 = 0; c0 < cols; c0 += kTileCols)
    tiles<Out>[rows - 1][cols - c0 >= kTileCols ? 1 : 0](a, a_row, a_pair, b + c0, ldb, pairs, c + c0, ldc, alpha);
}

// A 16 x 16 matrix of 32-bit words, transposed in registers.
KILN_AVX512_BF16 inline void transpose16x16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // within 128-bit lanes: pairs of rows, then quads
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int k = 0; k < 4; ++k) {  // then the 128-bit lanes across registers
    const __m512i v0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x88), v1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xdd);
    const __m512i w0 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x88),
                  w1 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xdd);
    r[k] = _mm512_shuffle_i32x4(v0, w0, 0x88);
    r[8 + k] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
    r[4 + k] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
  }
}

// x's rows [0, seq) as the right operand of x_i . y_j products: words[p ld + j]
// is row j's pair p (elements 2p, 2p + 1); columns [seq, ld) zero.
KILN_AVX512_BF16 void pack_transposed(Bf16Rows x, int64_t seq, int64_t D, int64_t ld, uint32_t* words) {
  const int64_t pairs = D / 2;
  for (int64_t j0 = 0; j0 < ld; j0 += 16)
    for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
      const int64_t width = std::min<int64_t>(16, pairs - p0);
      const __mmask16 mask = __mmask16((1u << width) - 1);
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = j0 + i < seq ? _mm512_maskz_loadu_epi32(mask, x.p + (j0 + i) * x.ld + 2 * p0) : _mm512_setzero_si512();
      transpose16x16(r);
      for (int64_t k = 0; k < width; ++k) _mm512_storeu_si512(words + (p0 + k) * ld + j0, r[k]);
    }
}

// 16 bf16 values, each in the low half of a word.
KILN_AVX512_BF16 inline __m512i widen(const uint16_t* x) {
  return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}

// x's rows [0, rows) in pairs as the right operand of sum-over-rows
// products: words[p cols + c] = (x[2p][c], x[2p + 1][c]), for pairs
// [0, pairs) and cols a multiple of 16; a row past `rows` is zero.
KILN_AVX512_BF16 void pack_row_pairs(Bf16Rows x, int64_t rows, int64_t cols, int64_t pairs, uint32_t* words) {
  for (int64_t p = 0; p < pairs; ++p) {
    uint32_t* w = words + p * cols;
    const uint16_t* lo = x.p + 2 * p * x.ld;
    const uint16_t* hi = lo + x.ld;
    for (int64_t c = 0; c < cols; c += 16) {
      const __m512i l = 2 * p < rows ? widen(lo + c) : _mm512_setzero_si512();
      const __m512i h = 2 * p + 1 < rows ? _mm512_slli_epi32(widen(hi + c), 16) : _mm512_setzero_si512();
      _mm512_storeu_si512(w + c, _mm512_or_si512(l, h));
    }
  }
}

// f32 to bf16 in one instruction per 16 values (round to nearest even, as
// float_to_bf16, but subnormals flush to zero): n is a multiple of 16.
KILN_AVX512_BF16 inline void round_span(const float* x, float times, uint16_t* to, int64_t n) {
  const __m512 s = _mm512_set1_ps(times);
  for (int64_t c = 0; c < n; c += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + c),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(x + c), s)));
}

// Two f32 rows rounded to bf16 and interleaved as pack_row_pairs does (hi
// null: a zero row); n is a multiple of 16.
KILN_AVX512_BF16 inline void round_pair_span(const float* lo, const float* hi, uint32_t* to, int64_t n) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i order = _mm512_load_si512(kInterleave);
  for (int64_t c = 0; c < n; c += 16) {
    const __m512 h = hi ? _mm512_loadu_ps(hi + c) : _mm512_setzero_ps();
    const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(h, _mm512_loadu_ps(lo + c));  // lo's 16, then hi's
    _mm512_storeu_si512(to + c, _mm512_permutexvar_epi16(order, both));
  }
}

// dO_i . O_i for a bf16 row pair of length D (a multiple of 16).
KILN_AVX512_BF16 inline float dot_rows(const uint16_t* a, const uint16_t* b, int64_t D) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; d += 16) {
    const __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(widen(a + d), 16));
    const __m512 y = _mm512_castsi512_ps(_mm512_slli_epi32(widen(b + d), 16));
    acc = _mm512_fmadd_ps(x, y, acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// The max and sum of a row of n scores (n a multiple of 16), in vectors
// (omp simd's reductions end in 16 dependent scalar adds per row here). The
// max skips NaN (max_ps returns its second operand then); a NaN score still
// makes the row NaN, through the exps and the sum.
KILN_AVX512_BF16 inline float row_max(const float* x, int64_t n) {
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < n; j += 16) m = _mm512_max_ps(_mm512_loadu_ps(x + j), m);
  return _mm512_reduce_max_ps(m);
}
KILN_AVX512_BF16 inline float row_sum(const float* x, int64_t n) {
  __m512 s = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) s = _mm512_add_ps(s, _mm512_loadu_ps(x + j));
  return _mm512_reduce_add_ps(s);
}

template <typename T>
T* grow(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

// A head is worked a tile of kTileRows query rows at a time, start to end:
// that tile's scores (and dP) stay in L1 from the product that makes them
// to the bf16 operand they become. Every row of a tile runs over the same
// `keys` scores (causal: up to the tile's last row, rounded up to 16, which
// is the same multiple of 16 for all its rows), the masked ones as -inf.
struct Tiling {
  int64_t seq, ld;  // ld: seq rounded up to 16, the scores' row length
  bool causal;
  int64_t keys(int64_t r1) const { return causal ? std::min(ld, round16(r1)) : ld; }
  int64_t len(int64_t i) const { return causal ? i + 1 : seq; }
};

}  // namespace

KILN_AVX512_BF16 void bf16_attention_head(Bf16Rows q, Bf16Rows k, Bf16Rows v, uint16_t* out, int64_t out_ld,
                                          float* lse, int64_t seq, int64_t D, float scale, bool causal,
                                          Bf16AttentionScratch& scratch) {
  const Tiling t{seq, round16(seq), causal};
  const int64_t ld = t.ld, pairs = ld / 2;
  uint32_t* kt = grow(scratch.words, D / 2 * ld + pairs * D + kTileRows * ld / 2);
  uint32_t* vp = kt + D / 2 * ld;
  uint16_t* p16 = reinterpret_cast<uint16_t*>(vp + pairs * D);  // the tile's P
  float* S = grow(scratch.floats, kTileRows * ld);              // the tile's scores
  pack_transposed(k, seq, D, ld, kt);
  pack_row_pairs(v, seq, D, pairs, vp);
  for (int64_t r0 = 0; r0 < seq; r0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, seq - r0), n = t.keys(r0 + rows);
    product(q.p + r0 * q.ld, q.ld, 2, kt, ld, D / 2, rows, n, S, ld, scale);  // S = scale Q K^T
    // The softmax a pass at a time over the tile's rows: each row's exps
    // overlap the next row's instead of waiting on its max.
    float mx[kTileRows];
    for (int64_t r = 0; r < rows; ++r) {
      float* si = S + r * ld;
      std::fill(si + t.len(r0 + r), si + n, -std::numeric_limits<float>::infinity());
      mx[r] = row_max(si, n);
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* si = S + r * ld;
      const float m = mx[r];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) si[j] = fast_exp(si[j] - m);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float sum = row_sum(S + r * ld, n);  // of at most seq terms in [0, 1], one of them 1
      round_span(S + r * ld, 1.0f / sum, p16 + r * ld, n);
      lse[r0 + r] = mx[r] + std::log(sum);
    }
    product(p16, ld, 2, vp, D, n / 2, rows, D, out + r0 * out_ld, out_ld, 1.0f);  // O = P V
  }
}

KILN_AVX512_BF16 void bf16_attention_head_backward(Bf16Rows dout, Bf16Rows q, Bf16Rows k, Bf16Rows v, Bf16Rows out,
                                                   const float* lse, Bf16HeadGrads grads, int64_t seq, int64_t D,
                                                   float scale, bool causal, Bf16AttentionScratch& scratch) {
  const Tiling t{seq, round16(seq), causal};
  const int64_t ld = t.ld, pairs = ld / 2, half_d = D / 2;
  uint32_t* kt = grow(scratch.words, 2 * half_d * ld + 3 * pairs * D + 2 * pairs * ld + kTileRows * ld / 2);
  uint32_t* vt = kt + half_d * ld;
  uint32_t* kp = vt + half_d * ld;
  uint32_t* qp = kp + pairs * D;
  uint32_t* gp = qp + pairs * D;
  uint32_t* pp = gp + pairs * D;    // P in pairs of rows
  uint32_t* dsp = pp + pairs * ld;  // dS in pairs of rows
  uint16_t* ds16 = reinterpret_cast<uint16_t*>(dsp + pairs * ld);  // the tile's dS
  float* P = grow(scratch.floats, 2 * kTileRows * ld);  // the tile's S, then P
  float* dS = P + kTileRows * ld;                       // the tile's dP, then dS
  pack_transposed(k, seq, D, ld, kt);
  pack_transposed(v, seq, D, ld, vt);
  pack_row_pairs(k, seq, D, pairs, kp);
  pack_row_pairs(q, seq, D, pairs, qp);
  pack_row_pairs(dout, seq, D, pairs, gp);
  for (int64_t r0 = 0; r0 < seq; r0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, seq - r0), n = t.keys(r0 + rows);
    product(q.p + r0 * q.ld, q.ld, 2, kt, ld, half_d, rows, n, P, ld, scale);         // S = scale Q K^T
    product(dout.p + r0 * dout.ld, dout.ld, 2, vt, ld, half_d, rows, n, dS, ld, 1.0f);  // dP = dO V^T
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r0 + r;
      const float delta = dot_rows(dout.p + i * dout.ld, out.p + i * out.ld, D), li = lse[i];
      float* pi = P + r * ld;
      float* dsi = dS + r * ld;
      std::fill(pi + t.len(i), pi + n, -std::numeric_limits<float>::infinity());  // P = 0, so dS = 0
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        pi[j] = fast_exp(pi[j] - li);  // P = exp(S - lse)
        dsi[j] = pi[j] * (dsi[j] - delta);
      }
    }
    for (int64_t r = 0; r < rows; r += 2) {  // r0 is even: the tile's row pairs are the head's
      uint32_t* to_p = pp + (r0 + r) / 2 * ld;
      uint32_t* to_ds = dsp + (r0 + r) / 2 * ld;
      const bool both = r + 1 < rows;
      round_pair_span(P + r * ld, both ? P + (r + 1) * ld : nullptr, to_p, n);
      round_pair_span(dS + r * ld, both ? dS + (r + 1) * ld : nullptr, to_ds, n);
      std::fill(to_p + n, to_p + ld, 0u);
      std::fill(to_ds + n, to_ds + ld, 0u);
    }
    for (int64_t r = 0; r < rows; ++r) round_span(dS + r * ld, 1.0f, ds16 + r * ld, n);
    product(ds16, ld, 2, kp, D, n / 2, rows, D, grads.dq + r0 * grads.dq_ld, grads.dq_ld, scale);  // dQ = scale dS K
  }
  const int64_t used = (seq + 1) / 2;  // pairs past the last row are zero
  std::fill(pp + used * ld, pp + pairs * ld, 0u);
  std::fill(dsp + used * ld, dsp + pairs * ld, 0u);
  for (int64_t j0 = 0; j0 < seq; j0 += kTileRows) {
    // Keys [j0, j0 + rows) get gradient from queries j0 on (causal): P and
    // dS are zero above the diagonal.
    const int64_t rows = std::min(kTileRows, seq - j0), p0 = causal ? j0 / 2 : 0;
    const uint16_t* p_cols = reinterpret_cast<const uint16_t*>(pp + p0 * ld + j0);
    const uint16_t* ds_cols = reinterpret_cast<const uint16_t*>(dsp + p0 * ld + j0);
    // dV = P^T dO, dK = scale dS^T Q
    product(p_cols, 2, 2 * ld, gp + p0 * D, D, pairs - p0, rows, D, grads.dv + j0 * grads.dv_ld, grads.dv_ld, 1.0f);
    product(ds_cols, 2, 2 * ld, qp + p0 * D, D, pairs - p0, rows, D, grads.dk + j0 * grads.dk_ld, grads.dk_ld, scale);
  }
}

#else  // no AVX-512 intrinsics in this compiler: attention.cpp's oneDNN products only

bool bf16_attention_kernels_apply(int64_t) { return false; }
void bf16_attention_head(Bf16Rows, Bf16Rows, Bf16Rows, uint16_t*, int64_t, float*, int64_t, int64_t, float, bool,
                         Bf16AttentionScratch&) {
  KILN_CHECK(false, "bf16 attention kernels are not built for this CPU");
}
void bf16_attention_head_backward(Bf16Rows, Bf16Rows, Bf16Rows, Bf16Rows, Bf16Rows, const float*, Bf16HeadGrads,
                                  int64_t, int64_t, float, bool, Bf16AttentionScratch&) {
  KILN_CHECK(false, "bf16 attention kernels are not built for this CPU");
}

#endif

}  // namespace kiln::cpu
