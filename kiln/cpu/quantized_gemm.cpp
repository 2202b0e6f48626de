// A prompt's product with quantized weights as an integer GEMM, as
// llama.cpp's repacked Q4_0 kernels run it: weight rows are interleaved
// four levels at a time, so one register holds four levels of each of eight
// rows (AVX2, 256 bits) or sixteen (AVX-512), and a product with four
// activation levels broadcast to every lane (vpdpbusd, or vpmaddubsw +
// vpmaddwd) adds to eight or sixteen outputs at once. A sub-block's integer
// sums are then exact block dots, and its f32 work (one conversion, one
// multiply and one fused multiply-add) is shared by the group's rows, where
// the decoding kernel (quantized_matmul.cpp) spends it per output. Weights
// are read as signed levels with an f32 scale, and where the format has
// one a minimum, per sub-block of 32 values (16 for Q2_K, Q3_K and Q6_K):
// every format is the same loop. Each group of rows is unpacked once per
// call into a buffer that stays in L1 while every activation row passes
// over it.
#include "kiln/cpu/quantized_gemm.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/cpu/kquant_matmul.h"
#include "kiln/cpu/x86_intrinsics.h"

// VnniPath's 512-bit values pass between functions only inside its
// flattened, AVX-512-targeted group_vnni, never through a call: GCC's
// warning that such a return would change the ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kiln::cpu {
namespace {

constexpr int64_t B = kQuantBlock;
constexpr int64_t kGroup = 8;  // the weight rows a 256-bit register's lanes hold

// x's rows quantized per block of 32, as the decoding kernel quantizes
// them: levels (plus 128 where the path takes them unsigned), scales, and,
// where the weights have minimums, each sub-block's scale times its level sum.
struct Activations {
  int64_t K = 0;  // whole blocks of 32
  std::vector<uint8_t> levels;
  std::vector<float> scales;
  std::vector<float> min_sums;
};

// A group of eight weight rows as the kernel reads them: levels as
// [K / 4][8 rows][4], and per sub-block [8 rows] of scales, minimums, and
// -128 times the levels' sum (what vpdpbusd's unsigned activations add).
struct Group {
  std::vector<int8_t> levels;
  std::vector<float> scales, mins;
  std::vector<int32_t> offsets;
};

// The scalar path, the reference: each lane's integer sum, then the same
// f32 steps as the vector paths, so every path gives the same bits.
struct ScalarPath {
  static constexpr int kRows = 4;
  static constexpr int kLanes = kGroup;
  struct Int {
    int32_t v[kLanes];
  };
  struct Flt {
    float v[kLanes];
  };
  using W = const int8_t*;
  static W load(const int8_t* w) { return w; }
  static Int start(const int32_t*) { return {}; }
  static void dot4(Int& acc, W w, const uint8_t* x) {
    for (int l = 0; l < kLanes; ++l)
      for (int t = 0; t < 4; ++t) acc.v[l] += int32_t(w[4 * l + t]) * int32_t(int8_t(x[t]));
  }
  static Flt zero() { return {}; }
  static void scale_add(Flt& total, const Int& acc, const float* ws, float xs) {
    for (int l = 0; l < kLanes; ++l) total.v[l] = std::fma(float(acc.v[l]), ws[l] * xs, total.v[l]);
  }
  static void min_add(Flt& total, const float* mins, float min_sum) {
    for (int l = 0; l < kLanes; ++l) total.v[l] = std::fma(mins[l], min_sum, total.v[l]);
  }
  static void store(const Flt& total, float* out) { std::copy(total.v, total.v + kLanes, out); }
};

#ifdef KILN_X86_INTRINSICS
inline int32_t four_levels(const uint8_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return v;
}

// The f32 steps both vector paths share.
struct VectorFloats {
  static constexpr int kLanes = kGroup;
  using Flt = __m256;
  static Flt zero() { return _mm256_setzero_ps(); }
  static void scale_add(Flt& total, __m256i acc, const float* ws, float xs) {
    const __m256 scale = _mm256_mul_ps(_mm256_loadu_ps(ws), _mm256_set1_ps(xs));
    total = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), scale, total);
  }
  static void min_add(Flt& total, const float* mins, float min_sum) {
    total = _mm256_fmadd_ps(_mm256_loadu_ps(mins), _mm256_set1_ps(min_sum), total);
  }
  static void store(const Flt& total, float* out) { _mm256_storeu_ps(out, total); }
};

// AVX2: vpmaddubsw takes an unsigned operand, so the weights go in as |w|
// and their signs move onto the broadcast activations; pairs of products
// stay under 2^15 (2 * 128 * 127).
struct Avx2Path : VectorFloats {
  static constexpr int kRows = 4;
  using Int = __m256i;
  struct W {
    __m256i signs, magnitudes;
  };
  static W load(const int8_t* w) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    return {v, _mm256_sign_epi8(v, v)};
  }
  static Int start(const int32_t*) { return _mm256_setzero_si256(); }
  static void dot4(Int& acc, const W& w, const uint8_t* x) {
    const __m256i signed_x = _mm256_sign_epi8(_mm256_set1_epi32(four_levels(x)), w.signs);
    const __m256i pairs = _mm256_maddubs_epi16(w.magnitudes, signed_x);
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

// AVX2 where every level is within +-32 (all but the 8-bit formats): the
// activations go in unsigned (level + 128) as on VNNI, and a pair of
// products stays under 2^15 (2 * 255 * 32): one instruction fewer a product.
// The pairs of kSteps products of four (as many as the format's largest
// level keeps under 2^15: level_steps) add in 16 bits before one widening
// to 32, which takes vpmaddwd, the product's second multiply, off all but
// one step in kSteps.
template <int kSteps>
struct Avx2SmallLevelsPath : VectorFloats {
  static constexpr int kRows = 4;
  static constexpr int kInt16Steps = kSteps;
  using Int = __m256i;
  using W = __m256i;
  static W load(const int8_t* w) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)); }
  static Int start(const int32_t* offsets) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offsets)); }
  static __m256i pairs(W w, const uint8_t* x) { return _mm256_maddubs_epi16(_mm256_set1_epi32(four_levels(x)), w); }
  static void add_pairs(__m256i& sums, W w, const uint8_t* x) { sums = _mm256_add_epi16(sums, pairs(w, x)); }
  static void widen(Int& acc, __m256i sums) {
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(sums, _mm256_set1_epi16(1)));
  }
};

// AVX-512 VNNI: vpdpbusd adds four u8 x s8 products a lane in one
// instruction, on sixteen weight rows a 512-bit register. The activations go
// in unsigned (level + 128); the 128 times each weight sub-block's level sum
// is taken off before it starts.
#define KILN_VNNI_TARGET gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")
struct VnniPath {
  static constexpr int kRows = 8;
  static constexpr int kLanes = 2 * kGroup;
  using Int = __m512i;
  using W = __m512i;
  using Flt = __m512;
  [[KILN_VNNI_TARGET]] static W load(const int8_t* w) { return _mm512_loadu_si512(w); }
  [[KILN_VNNI_TARGET]] static Int start(const int32_t* offsets) { return _mm512_loadu_si512(offsets); }
  [[KILN_VNNI_TARGET]] static void dot4(Int& acc, W w, const uint8_t* x) {
    acc = _mm512_dpbusd_epi32(acc, _mm512_set1_epi32(four_levels(x)), w);
  }
  [[KILN_VNNI_TARGET]] static Flt zero() { return _mm512_setzero_ps(); }
  [[KILN_VNNI_TARGET]] static void scale_add(Flt& total, Int acc, const float* ws, float xs) {
    const __m512 scale = _mm512_mul_ps(_mm512_loadu_ps(ws), _mm512_set1_ps(xs));
    total = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), scale, total);
  }
  [[KILN_VNNI_TARGET]] static void min_add(Flt& total, const float* mins, float min_sum) {
    total = _mm512_fmadd_ps(_mm512_loadu_ps(mins), _mm512_set1_ps(min_sum), total);
  }
  [[KILN_VNNI_TARGET]] static void store(const Flt& total, float* out) { _mm512_storeu_ps(out, total); }
};
#endif

// R activation rows from m0 against a group's P::kLanes weight rows:
// outputs (m0 + r, n0 + l) for l < valid.
template <typename P, int S, bool kMins, int R>
[[gnu::always_inline]] inline void tile(const Group& g, int64_t sub_blocks, const Activations& a, int64_t m0, int64_t N,
                                        int64_t n0, int64_t valid, float* out) {
  const int64_t blocks = a.K / B;
  typename P::Flt total[R];
  for (int r = 0; r < R; ++r) total[r] = P::zero();
  for (int64_t i = 0; i < sub_blocks; ++i) {
    typename P::Int acc[R];
    for (int r = 0; r < R; ++r) acc[r] = P::start(g.offsets.data() + i * P::kLanes);
    const int8_t* w = g.levels.data() + i * S * P::kLanes;
    const uint8_t* x = a.levels.data() + m0 * a.K + i * S;
    if constexpr (requires { P::kInt16Steps; }) {
      static_assert((S / 4) % P::kInt16Steps == 0);
      for (int j = 0; j < S / 4; j += P::kInt16Steps) {
        typename P::Int sums[R];
        const auto first = P::load(w + j * 4 * P::kLanes);
        for (int r = 0; r < R; ++r) sums[r] = P::pairs(first, x + r * a.K + 4 * j);
        for (int t = 1; t < P::kInt16Steps; ++t) {
          const auto levels = P::load(w + (j + t) * 4 * P::kLanes);
          for (int r = 0; r < R; ++r) P::add_pairs(sums[r], levels, x + r * a.K + 4 * (j + t));
        }
        for (int r = 0; r < R; ++r) P::widen(acc[r], sums[r]);
      }
    } else {
      for (int j = 0; j < S / 4; ++j) {
        const auto levels = P::load(w + j * 4 * P::kLanes);
        for (int r = 0; r < R; ++r) P::dot4(acc[r], levels, x + r * a.K + 4 * j);
      }
    }
    for (int r = 0; r < R; ++r)
      P::scale_add(total[r], acc[r], g.scales.data() + i * P::kLanes, a.scales[(m0 + r) * blocks + i * S / B]);
    if constexpr (kMins)
      for (int r = 0; r < R; ++r) P::min_add(total[r], g.mins.data() + i * P::kLanes, a.min_sums[(m0 + r) * sub_blocks + i]);
  }
  for (int r = 0; r < R; ++r) {
    float* row = out + (m0 + r) * N + n0;
    if (valid == P::kLanes) {
      P::store(total[r], row);
    } else {
      float lanes[P::kLanes];
      P::store(total[r], lanes);
      std::copy(lanes, lanes + valid, row);
    }
  }
}

// The last M % kRows rows, one tile of that many.
template <typename P, int S, bool kMins, int R>
[[gnu::always_inline]] inline void last_tile(int64_t rows, const Group& g, int64_t sub_blocks, const Activations& a,
                                             int64_t m0, int64_t N, int64_t n0, int64_t valid, float* out) {
  if constexpr (R > 0) {
    if (rows == R) return tile<P, S, kMins, R>(g, sub_blocks, a, m0, N, n0, valid, out);
    last_tile<P, S, kMins, R - 1>(rows, g, sub_blocks, a, m0, N, n0, valid, out);
  }
}

template <typename P, int S, bool kMins>
[[gnu::always_inline]] inline void group_rows(const Group& g, const Activations& a, int64_t M, int64_t N, int64_t n0,
                                              float* out) {
  const int64_t sub_blocks = a.K / S, valid = std::min<int64_t>(P::kLanes, N - n0);
  int64_t m = 0;
  for (; m + P::kRows <= M; m += P::kRows) tile<P, S, kMins, P::kRows>(g, sub_blocks, a, m, N, n0, valid, out);
  last_tile<P, S, kMins, P::kRows - 1>(M - m, g, sub_blocks, a, m, N, n0, valid, out);
}

// Each path's loops flattened, so everything inlines into its instruction set.
template <int S, bool kMins>
void group_scalar(const Group& g, const Activations& a, int64_t M, int64_t N, int64_t n0, float* out) {
  group_rows<ScalarPath, S, kMins>(g, a, M, N, n0, out);
}
#ifdef KILN_X86_INTRINSICS
template <int S, bool kMins>
[[gnu::flatten]] void group_avx2(const Group& g, const Activations& a, int64_t M, int64_t N, int64_t n0, float* out) {
  group_rows<Avx2Path, S, kMins>(g, a, M, N, n0, out);
}
template <int S, bool kMins, int kSteps>
[[gnu::flatten]] void group_avx2_small(const Group& g, const Activations& a, int64_t M, int64_t N, int64_t n0,
                                       float* out) {
  group_rows<Avx2SmallLevelsPath<kSteps>, S, kMins>(g, a, M, N, n0, out);
}
template <int S, bool kMins>
[[gnu::flatten, KILN_VNNI_TARGET]] void group_vnni(const Group& g, const Activations& a, int64_t M, int64_t N,
                                                   int64_t n0, float* out) {
  group_rows<VnniPath, S, kMins>(g, a, M, N, n0, out);
}
#endif

using GroupKernel = void (*)(const Group&, const Activations&, int64_t, int64_t, int64_t, float*);

constexpr bool has_minimums(QuantFormat f) {
  return f == QuantFormat::q4_1 || f == QuantFormat::q5_1 || f == QuantFormat::q2_k || f == QuantFormat::q4_k ||
         f == QuantFormat::q5_k;
}
// The largest |level| of each format's weights as the GEMM multiplies them
// (zero points taken off; minimums apart; f16 has no levels).
constexpr int largest_level(QuantFormat f) {
  switch (f) {
    case QuantFormat::int4: return 8;
    case QuantFormat::q4_1: case QuantFormat::int4_zero: case QuantFormat::q4_k: return 15;
    case QuantFormat::q5_0: return 16;
    case QuantFormat::q5_1: case QuantFormat::q5_k: return 31;
    case QuantFormat::q2_k: return 3;
    case QuantFormat::q3_k: return 4;
    case QuantFormat::q6_k: return 32;
    default: return 127;  // int8, int8b, and IQ4's looked-up levels
  }
}
// Levels within +-32: every format but the 8-bit ones and IQ4's.
constexpr bool small_levels(QuantFormat f) { return largest_level(f) <= 32; }
// How many products of four add in 16 bits: their pair sums of unsigned
// activations (up to 255) stay under 2^15, a power of two up to S / 4.
constexpr int level_steps(QuantFormat f, int S) {
  return std::min(S / 4, int(std::bit_floor(unsigned(32767 / (2 * 255 * largest_level(f))))));
}
// A path's kernel, the weight rows of its groups, and whether it takes the
// activations unsigned (level + 128).
struct Kernel {
  GroupKernel run;
  int64_t lanes;
  bool unsigned_activations;
};
template <int S, bool kMins>
Kernel kernel_for(QuantDot dot, QuantFormat f) {
#ifdef KILN_X86_INTRINSICS
  if (dot == QuantDot::avx512_vnni) return {group_vnni<S, kMins>, VnniPath::kLanes, true};
  if (dot == QuantDot::avx2 && small_levels(f)) {
    constexpr std::array kernels{group_avx2_small<S, kMins, 1>, group_avx2_small<S, kMins, 2>,
                                 group_avx2_small<S, kMins, 4>, group_avx2_small<S, kMins, S / 4>};
    return {kernels[std::countr_zero(unsigned(level_steps(f, S)))], VectorFloats::kLanes, true};
  }
  if (dot == QuantDot::avx2) return {group_avx2<S, kMins>, Avx2Path::kLanes, false};
#endif
  (void)dot, (void)f;
  return {group_scalar<S, kMins>, ScalarPath::kLanes, false};
}

// A block of 4- or 5-bit levels (unpack_levels' layout) as signed levels,
// zero taken off, or (lookup: IQ4_NL) each level's kIq4nlValues.
inline void signed_block_levels(const uint8_t* block, bool five_bit, bool lookup, int8_t zero, int8_t* out) {
#ifdef KILN_X86_INTRINSICS
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block));
  const __m128i nibble = _mm_set1_epi8(0x0f);
  __m256i levels = _mm256_setr_m128i(_mm_and_si128(packed, nibble), _mm_and_si128(_mm_srli_epi16(packed, 4), nibble));
  if (lookup) {
    const __m128i values = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(values), levels));
    return;
  }
  if (five_bit) {  // bit c of the word, as 16 in byte c: byte c / 8 of the word picked into byte c, then bit c % 8 tested
    uint32_t fifth;
    std::memcpy(&fifth, block + B / 2, 4);
    const __m256i bytes = _mm256_shuffle_epi8(
        _mm256_set1_epi32(int32_t(fifth)),
        _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    levels = _mm256_or_si256(levels, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_sub_epi8(levels, _mm256_set1_epi8(zero)));
#else
  uint8_t unsigned_levels[B];
  unpack_levels(block, five_bit, unsigned_levels);
  for (int64_t j = 0; j < B; ++j)
    out[j] = lookup ? kIq4nlValues[unsigned_levels[j]] : int8_t(int32_t(unsigned_levels[j]) - zero);
#endif
}

// Row n of a matrix in blocks of 32 as signed levels, a scale and (q4_1,
// q5_1) a minimum per block: value = scale * level + minimum (iq4_nl's
// levels the values they look up).
void block_row_levels(const QuantizedMatrix& w, int64_t n, int8_t* levels, float* scales, float* mins) {
  const int64_t blocks = w.blocks();
  if (w.format == QuantFormat::int8) {
    std::memcpy(levels, w.data.data<uint8_t>() + n * blocks * B, size_t(blocks * B));
    std::fill_n(scales, blocks, w.scales.data<float>()[n]);
    return;
  }
  const int64_t stride = w.eight_bit() ? B : w.five_bit() ? kFiveBitBlockBytes : B / 2;
  const uint8_t* zeros = w.zeros.defined() ? w.zeros.data<uint8_t>() : nullptr;
  const float* row_mins = w.mins.defined() ? w.mins.data<float>() : nullptr;
  const int32_t fixed_zero = row_mins ? 0 : w.five_bit() ? 16 : 8;
  const int64_t first = w.block_index(n), step = w.block_step(n);  // (rows may be in groups: quantized.h)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = first + b * step;
    const uint8_t* block = w.data.data<uint8_t>() + at * stride;
    if (w.eight_bit()) std::memcpy(levels + b * B, block, B);
    else signed_block_levels(block, w.five_bit(), w.lookup(), int8_t(zeros ? int32_t(zeros[at]) : fixed_zero),
                             levels + b * B);
    scales[b] = w.scales.data<float>()[at];
    if (row_mins) mins[b] = row_mins[at];
  }
}

// `lanes` rows' levels, side by side ([lanes][K]), as the kernel reads them:
// word k / 4 of the group is the rows' levels k .. k + 3, each eight rows'
// an 8 x 8 transpose of 4-byte words per block of 32 columns.
void interleave(const int8_t* rows, int64_t K, int64_t lanes, int8_t* out) {
  for (int64_t h = 0; h < lanes / kGroup; ++h, rows += kGroup * K, out += kGroup * 4)
    for (int64_t k = 0; k < K; k += B) {
#ifdef KILN_X86_INTRINSICS
      __m256i r[kGroup];
      for (int64_t l = 0; l < kGroup; ++l) r[l] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + l * K + k));
      __m256i t[kGroup];
      for (int l = 0; l < kGroup; l += 2) {  // words of rows l, l + 1 paired
        t[l] = _mm256_unpacklo_epi32(r[l], r[l + 1]);
        t[l + 1] = _mm256_unpackhi_epi32(r[l], r[l + 1]);
      }
      for (int l = 0; l < kGroup; l += 4)  // then of rows l .. l + 3, a 128-bit lane's four
        for (int q = 0; q < 2; ++q) {
          r[l + q] = _mm256_unpacklo_epi64(t[l + q], t[l + 2 + q]);
          r[l + 2 + q] = _mm256_unpackhi_epi64(t[l + q], t[l + 2 + q]);
        }
      // r[0..3]: words 0, 2, 1, 3 (and 4, 6, 5, 7 in the high lanes) of rows 0-3; r[4..7] of rows 4-7.
      constexpr int word_in_lane[4] = {0, 2, 1, 3};
      for (int q = 0; q < 4; ++q) {
        const int word = word_in_lane[q];
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (k + 4 * word) * lanes),
                            _mm256_permute2x128_si256(r[q], r[4 + q], 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (k + 4 * (word + 4)) * lanes),
                            _mm256_permute2x128_si256(r[q], r[4 + q], 0x31));
      }
#else
      for (int64_t l = 0; l < kGroup; ++l)
        for (int64_t c = k; c < k + B; c += 4) std::memcpy(out + c * lanes + l * 4, rows + l * K + c, 4);
#endif
    }
}

// Per-thread space for unpacking a group's rows.
struct Scratch {
  std::vector<int8_t> rows;
  std::vector<float> scales, mins;
};

// Rows n0 .. n0 + lanes - 1 (zeros past the matrix's last row) into g.
void pack_group(const QuantizedMatrix& w, int64_t n0, int64_t K, int64_t S, int64_t lanes, Scratch& scratch, Group& g) {
  const int64_t sub_blocks = K / S;
  const bool mins = has_minimums(w.format);
  scratch.rows.resize(size_t(K * lanes));
  scratch.scales.resize(size_t(sub_blocks * lanes));
  scratch.mins.resize(mins ? size_t(sub_blocks * lanes) : 0);
  const int64_t valid = std::min(lanes, w.rows - n0);
  for (int64_t l = 0; l < valid; ++l) {
    int8_t* levels = scratch.rows.data() + l * K;
    float* scales = scratch.scales.data() + l * sub_blocks;
    float* row_mins = mins ? scratch.mins.data() + l * sub_blocks : nullptr;
    if (w.k_quant()) kquant_row_levels(w, n0 + l, levels, scales, row_mins);
    else block_row_levels(w, n0 + l, levels, scales, row_mins);
  }
  std::fill(scratch.rows.begin() + valid * K, scratch.rows.end(), int8_t(0));
  std::fill(scratch.scales.begin() + valid * sub_blocks, scratch.scales.end(), 0.0f);
  if (mins) std::fill(scratch.mins.begin() + valid * sub_blocks, scratch.mins.end(), 0.0f);
  g.levels.resize(size_t(K * lanes));
  interleave(scratch.rows.data(), K, lanes, g.levels.data());
  g.scales.resize(size_t(sub_blocks * lanes));
  g.mins.resize(scratch.mins.size());
  g.offsets.resize(size_t(sub_blocks * lanes));
  for (int64_t i = 0; i < sub_blocks; ++i)
    for (int64_t l = 0; l < lanes; ++l) {
      g.scales[size_t(i * lanes + l)] = scratch.scales[size_t(l * sub_blocks + i)];
      if (mins) g.mins[size_t(i * lanes + l)] = scratch.mins[size_t(l * sub_blocks + i)];
    }
  // Each row's level sum per sub-block, from the interleaved words: lane l
  // of word k / 4 holds row l's levels k .. k + 3.
  for (int64_t i = 0; i < sub_blocks; ++i)
    for (int64_t h = 0; h < lanes / kGroup; ++h) {
      const int8_t* words = g.levels.data() + i * S * lanes + h * kGroup * 4;
      int32_t* offsets = g.offsets.data() + i * lanes + h * kGroup;
#ifdef KILN_X86_INTRINSICS
      __m256i sums = _mm256_setzero_si256();
      for (int64_t k = 0; k < S; k += 4) {
        const __m256i word = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + k * lanes));
        sums = _mm256_add_epi32(sums, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), word),
                                                        _mm256_set1_epi16(-128)));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(offsets), sums);
#else
      for (int64_t l = 0; l < kGroup; ++l) {
        offsets[l] = 0;
        for (int64_t k = 0; k < S; ++k) offsets[l] += -128 * int32_t(words[(k / 4) * 4 * lanes + l * 4 + k % 4]);
      }
#endif
    }
}

// Activation row m into a (levels, scales, and minimums' sums of sub-blocks of S).
void quantize_row(const float* x, int64_t cols, int64_t m, int64_t S, bool unsigned_levels, bool mins,
                  Activations& a) {
  const int64_t blocks = a.K / B;
  for (int64_t b = 0; b < blocks; ++b) {
    int8_t q[B];
    float& scale = a.scales[size_t(m * blocks + b)];
    quantize_activation_block(x + m * cols + b * B, std::min(B, cols - b * B), q, scale);
    uint8_t* levels = a.levels.data() + m * a.K + b * B;
    for (int64_t j = 0; j < B; ++j) levels[j] = uint8_t(q[j]) ^ (unsigned_levels ? 0x80 : 0);
    for (int64_t i = 0; mins && i < B / S; ++i) {
      int32_t sum = 0;
      for (int64_t j = i * S; j < (i + 1) * S; ++j) sum += q[j];
      a.min_sums[size_t(m * (a.K / S) + b * (B / S) + i)] = scale * float(sum);
    }
  }
}

}  // namespace

void quantized_gemm(const float* x, int64_t M, const QuantizedMatrix& w, float* out, QuantDot dot) {
  const int64_t K = w.k_quant() ? w.cols : w.padded_cols(), N = w.rows;
  const int64_t S = sub_block_values(w.format);
  const bool mins = has_minimums(w.format);
  const QuantFormat f = w.format;
  const Kernel kernel = S == 16 ? (mins ? kernel_for<16, true>(dot, f) : kernel_for<16, false>(dot, f))
                                : (mins ? kernel_for<32, true>(dot, f) : kernel_for<32, false>(dot, f));
  Activations a{K, std::vector<uint8_t>(size_t(M * K)), std::vector<float>(size_t(M * (K / B))),
                std::vector<float>(mins ? size_t(M * (K / S)) : 0)};
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; ++m) quantize_row(x, w.cols, m, S, kernel.unsigned_activations, mins, a);
    Group g;
    Scratch scratch;
#pragma omp for schedule(dynamic, 1)
    for (int64_t n0 = 0; n0 < N; n0 += kernel.lanes) {
      pack_group(w, n0, K, S, kernel.lanes, scratch, g);
      kernel.run(g, a, M, N, n0, out);
    }
  }
}

}  // namespace kiln::cpu
