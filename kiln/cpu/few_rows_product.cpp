#include "kiln/cpu/few_rows_product.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kiln/backend/backend.h"
#include "kiln/core/dtype.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/isa.h"
#include "kiln/cpu/spin_pool.h"
#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {
namespace {

constexpr int kLanes = 32;

// Lanes t and t + 16, then t and t + 8, t + 4, t + 2, t + 1: one order, always.
inline float sum_lanes(float* lanes) {
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int t = 0; t < width; ++t) lanes[t] += lanes[t + width];
  return lanes[0];
}

#ifdef KILN_X86_INTRINSICS
// sum_lanes' tree on lanes 0-31 held in four registers of eight, in registers.
inline float sum_lanes(const __m256* lanes) {
  const __m256 eight = _mm256_add_ps(_mm256_add_ps(lanes[0], lanes[2]), _mm256_add_ps(lanes[1], lanes[3]));
  __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  four = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(four, _mm_movehdup_ps(four)));
}
#endif

#ifdef KILN_X86_INTRINSICS
// Whether each weight line is asked for 4 KB ahead (prefetch_ahead): Intel's
// cores keep too few reads in flight without it, while on a Zen 3 it slowed
// an f32 SmolLM-135M-shaped decode by 8% at two threads and 18% at one (its
// hardware prefetcher does better alone; 2026-11-29).
const bool kPrefetchWeights = !cpu_is_amd();
// Whether a single stream reads two 16-bit weight rows at once, as f32's
// always does (dot_two_weight_rows): on Intel, where one row's reads in
// flight are too few, it decoded TinyLlama's shape in f16 1.2x and bf16
// 1.1x faster (a Xeon with AMX, 2 threads, 2026-11-30); on a Zen 3 bf16 ran
// ~5% slower so (2026-11-29).
const bool kTwoRows16 = !cpu_is_amd();
#endif

// A weight as f32: bf16 and f16 widened, f32 as it is.
inline float weight_value(uint16_t w) { return bf16_to_float(w); }
inline float weight_value(f16_t w) { return f16_to_float(w.bits); }
inline float weight_value(float w) { return w; }
#ifdef KILN_X86_INTRINSICS
inline __m256 weight_values(const uint16_t* w) { return widen_bf16x8(w); }
inline __m256 weight_values(const f16_t* w) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
}
inline __m256 weight_values(const float* w) { return _mm256_loadu_ps(w); }
#endif

// A row's sum: its lanes `acc` (k = 0 .. k-1 accumulated) with the tail of
// K from k on added in lane order.
template <typename W>
inline float tail_sum(float* acc, const float* a, const W* w, int64_t k, int64_t K) {
  for (int t = 0; k + t < K; ++t) acc[t] = std::fma(a[k + t], weight_value(w[k + t]), acc[t]);
  return sum_lanes(acc);
}

// R rows of a against one weight row: each weight is widened once for the R
// of them. Lane t of a row's 32 accumulates k = t mod 32 in k order: four
// independent chains of fused multiply-adds per row, which one row (a
// single decoding stream) needs to keep up with memory. The AVX2 path holds
// a row's lanes in four registers (eight accumulators at R = 2: more rows
// would spill), the scalar path (and a tail of K) in an array, with the
// same bits.
template <int R, typename W>
inline void dot_rows(const float* const* a, const W* w, int64_t K, float* sums) {
  float acc[R][kLanes];
  int64_t k = 0;
#ifdef KILN_X86_INTRINSICS
  __m256 lanes[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) lanes[r][j] = _mm256_setzero_ps();
  for (; k + kLanes <= K; k += kLanes) {
    if (kPrefetchWeights)
      for (int64_t b = 0; b < int64_t(kLanes * sizeof(W)); b += 64)
        prefetch_ahead(reinterpret_cast<const char*>(w + k) + b);
    __m256 wide[4];
    for (int j = 0; j < 4; ++j) wide[j] = weight_values(w + k + 8 * j);
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j) lanes[r][j] = _mm256_fmadd_ps(_mm256_loadu_ps(a[r] + k + 8 * j), wide[j], lanes[r][j]);
  }
  if (k == K) {
    for (int r = 0; r < R; ++r) sums[r] = sum_lanes(lanes[r]);
    return;
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(acc[r] + 8 * j, lanes[r][j]);
#else
  for (int r = 0; r < R; ++r) std::fill(acc[r], acc[r] + kLanes, 0.0f);
  for (; k + kLanes <= K; k += kLanes)
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < kLanes; ++t) acc[r][t] = std::fma(a[r][k + t], weight_value(w[k + t]), acc[r][t]);
#endif
  for (int r = 0; r < R; ++r) sums[r] = tail_sum(acc[r], a[r], w, k, K);
}

#ifdef KILN_X86_INTRINSICS
// The weight lines two rows read side by side ask for ahead of them (w1
// one stride past w0, then the next pair after them): each row's stream
// kWeightPrefetchBytes of its progress ahead, on through the next pairs'
// same rows. Asking 4 KB past each row's own address asked w0's stream
// for w1's lines (being read already) and never for the next pair's second
// row: f32 and bf16 decoded 5-10% slower so, f16 2-5% (the Xeon with AMX,
// TinyLlama's and SmolLM's shapes, 2026-11-30). (Asking past the matrix's
// end is harmless: a prefetch does not fault.)
class PairPrefetch {
 public:
  PairPrefetch(const char* w0, int64_t stride, int64_t row_bytes)
      : stride_(stride), row_bytes_(std::max<int64_t>(row_bytes, 1)) {
    const int64_t pairs_ahead = kWeightPrefetchBytes / row_bytes_, within = kWeightPrefetchBytes % row_bytes_;
    at_ = w0 + pairs_ahead * 2 * stride + within;
    left_ = row_bytes_ - within;
  }
  // The next `bytes` of both streams, a line at a time.
  void ask(int64_t bytes) {
    for (int64_t b = 0; b < bytes; b += 64) {
      __builtin_prefetch(at_, 0, kWeightPrefetchLocality);
      __builtin_prefetch(at_ + stride_, 0, kWeightPrefetchLocality);
      at_ += 64;
      left_ -= 64;
      if (left_ <= 0) at_ += 2 * stride_ - row_bytes_, left_ += row_bytes_;
    }
  }

 private:
  const char* at_;
  int64_t left_, stride_, row_bytes_;
};

// One row of a (a single decoding stream) against two weight rows at once:
// two streams of weights in flight per thread, which read f32 weights ~10%
// faster on a Zen 3 at one and two threads (TinyLlama's shape, 2026-11-29).
// Each weight row's lanes accumulate as dot_rows<1>'s do: the same bits.
template <typename W>
inline void dot_two_weight_rows(const float* a, const W* w0, const W* w1, int64_t K, float* sums) {
  __m256 lanes[2][4];
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 4; ++j) lanes[r][j] = _mm256_setzero_ps();
  PairPrefetch prefetch(reinterpret_cast<const char*>(w0), (w1 - w0) * int64_t(sizeof(W)), K * int64_t(sizeof(W)));
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    if (kPrefetchWeights) prefetch.ask(kLanes * sizeof(W));
    for (int j = 0; j < 4; ++j) {
      const __m256 x = _mm256_loadu_ps(a + k + 8 * j);
      lanes[0][j] = _mm256_fmadd_ps(x, weight_values(w0 + k + 8 * j), lanes[0][j]);
      lanes[1][j] = _mm256_fmadd_ps(x, weight_values(w1 + k + 8 * j), lanes[1][j]);
    }
  }
  const W* w[2] = {w0, w1};
  for (int r = 0; r < 2; ++r) {
    if (k == K) {
      sums[r] = sum_lanes(lanes[r]);
      continue;
    }
    float acc[kLanes];
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(acc + 8 * j, lanes[r][j]);
    sums[r] = tail_sum(acc, a, w[r], k, K);
  }
}
// The same for 16-bit weights in 512-bit registers: a row's lanes 0-15 and
// 16-31 in two registers, so the sums are dot_two_weight_rows' bits.
// Widening sixteen f16 weights an instruction, not eight, decoded
// TinyLlama's F16 shape 1.04-1.16x faster (the Xeon with AMX, 2 threads,
// 2026-11-30; BF16 the same within the noise).
template <typename W>
[[gnu::target("avx512f")]] inline __m512 weight_values16(const W* w) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  if constexpr (std::is_same_v<W, f16_t>) return _mm512_cvtph_ps(bits);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));  // bf16: the high half of an f32
}
template <typename W>
[[gnu::target("avx512f")]] void dot_two_weight_rows_512(const float* a, const W* w0, const W* w1, int64_t K,
                                                        float* sums) {
  __m512 lanes[2][2] = {{_mm512_setzero_ps(), _mm512_setzero_ps()}, {_mm512_setzero_ps(), _mm512_setzero_ps()}};
  PairPrefetch prefetch(reinterpret_cast<const char*>(w0), (w1 - w0) * int64_t(sizeof(W)), K * int64_t(sizeof(W)));
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    if (kPrefetchWeights) prefetch.ask(kLanes * sizeof(W));  // (32 16-bit weights: one line a row)
    const __m512 x0 = _mm512_loadu_ps(a + k), x1 = _mm512_loadu_ps(a + k + 16);
    lanes[0][0] = _mm512_fmadd_ps(x0, weight_values16(w0 + k), lanes[0][0]);
    lanes[0][1] = _mm512_fmadd_ps(x1, weight_values16(w0 + k + 16), lanes[0][1]);
    lanes[1][0] = _mm512_fmadd_ps(x0, weight_values16(w1 + k), lanes[1][0]);
    lanes[1][1] = _mm512_fmadd_ps(x1, weight_values16(w1 + k + 16), lanes[1][1]);
  }
  const W* w[2] = {w0, w1};
  for (int r = 0; r < 2; ++r) {
    float acc[kLanes];
    _mm512_storeu_ps(acc, lanes[r][0]);
    _mm512_storeu_ps(acc + 16, lanes[r][1]);
    sums[r] = tail_sum(acc, a, w[r], k, K);
  }
}
#endif

template <typename W>
struct Operands {
  int64_t M, K;
  float alpha;
  const float* a;
  int64_t lda;
  const W* w;
  int64_t ldw;
  float beta;
  float* c;
  int64_t ldc;
};

// c[m, n] = alpha * sum (+ beta * c[m, n]).
template <typename W>
inline void store(const Operands<W>& p, int64_t m, int64_t n, float sum) {
  float& out = p.c[m * p.ldc + n];
  out = p.beta == 0.0f ? p.alpha * sum : p.alpha * sum + p.beta * out;
}

template <int R, typename W>
inline void outputs(const Operands<W>& p, int64_t n, int64_t m) {
  const float* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = p.a + (m + r) * p.lda;
  float sums[R];
  dot_rows<R>(rows, p.w + n * p.ldw, p.K, sums);
  for (int r = 0; r < R; ++r) store(p, m + r, n, sums[r]);
}

// Weight rows n0 .. n1 against every row of a, two rows at a time (the
// weight row stays in L1 while each pair reads it).
template <typename W>
void weight_rows(const Operands<W>& p, int64_t n0, int64_t n1) {
#ifdef KILN_X86_INTRINSICS
  if (std::is_same_v<W, float> || kTwoRows16) {
    if (p.M == 1) {
      auto two_rows = dot_two_weight_rows<W>;
      if constexpr (!std::is_same_v<W, float>)
        if (isa_allows(Isa::avx512)) two_rows = dot_two_weight_rows_512<W>;
      int64_t n = n0;
      for (; n + 2 <= n1; n += 2) {
        float sums[2];
        two_rows(p.a, p.w + n * p.ldw, p.w + (n + 1) * p.ldw, p.K, sums);
        for (int r = 0; r < 2; ++r) store(p, 0, n + r, sums[r]);
      }
      if (n < n1) outputs<1, W>(p, n, 0);
      return;
    }
  }
#endif
  for (int64_t n = n0; n < n1; ++n) {
    int64_t m = 0;
    for (; m + 2 <= p.M; m += 2) outputs<2, W>(p, n, m);
    if (m < p.M) outputs<1, W>(p, n, m);
  }
}

template <typename W>
void few_rows(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda, const W* w, int64_t ldw,
              float beta, float* c, int64_t ldc) {
  const Operands<W> p{M, K, alpha, a, lda, w, ldw, beta, c, ldc};
  for_row_chunks(N, M * N * K, [&](int64_t n0, int64_t n1) { weight_rows(p, n0, n1); });
}

}  // namespace

void few_rows_times_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
                         const uint16_t* w, int64_t ldw, float beta, float* c, int64_t ldc) {
  few_rows(M, N, K, alpha, a, lda, w, ldw, beta, c, ldc);
}

void few_rows_times_f16(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda, const uint16_t* w,
                        int64_t ldw, float beta, float* c, int64_t ldc) {
  few_rows(M, N, K, alpha, a, lda, reinterpret_cast<const f16_t*>(w), ldw, beta, c, ldc);
}

void few_rows_times_f32(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda, const float* w,
                        int64_t ldw, float beta, float* c, int64_t ldc) {
  few_rows(M, N, K, alpha, a, lda, w, ldw, beta, c, ldc);
}

}  // namespace kiln::cpu
