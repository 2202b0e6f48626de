// Products with ggml's K-quants (kiln/core/quantized_k.h), as llama.cpp
// computes them: each activation row quantized per 256 values to int8 (its
// Q8_K: scale from the value of largest magnitude, and the sums of each 16
// levels), then per weight block the integer products of each sub-block
// times its integer scale, and one f32 multiply-add per block and lane.
//
// The lanes: lane l of a block's int32 sums holds bytes 4l .. 4l + 3 of
// every 32-value chunk of the block. AVX2 gets them from vpmaddubsw (pairs)
// and vpmaddwd with the sub-block's scale; AVX-512 the same over two chunks
// at once (64 values), the two halves added.
// Both are exact integers, so with the same f32 steps after them (one fused
// multiply-add per lane and block, the lanes summed in a fixed order, the
// minimums' term in one accumulator) every path, the scalar one included,
// gives the same bits. Nothing saturates: levels stop at 63, activations at
// +-127, so a pair of byte products is at most 2 * 63 * 127 < 2^15.
#include "kiln/cpu/kquant_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/core/quantized_k.h"
#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {
namespace {

constexpr int64_t S = kSuperBlock;

// ggml's nearest_int: round half to even by the 1.5 * 2^23 trick, as Q8_K's levels are rounded.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// Activation rows as Q8_K: per row and block, the scale, 256 levels and the 16 sums of 16 levels.
struct Q8K {
  int64_t blocks = 0;
  std::vector<float> scales;
  std::vector<int8_t> levels;
  std::vector<int16_t> sums;
};

// llama.cpp's quantize_row_q8_K: the value of largest magnitude maps to -127.
void quantize_block_q8k(const float* x, float& scale, int8_t* q, int16_t* sums) {
  float max = 0, amax = 0;
  for (int64_t j = 0; j < S; ++j)
    if (std::abs(x[j]) > amax) amax = std::abs(x[j]), max = x[j];
  if (amax == 0) {
    scale = 0;
    std::fill(q, q + S, int8_t(0));
    std::fill(sums, sums + S / 16, int16_t(0));
    return;
  }
  const float inverse = -127.0f / max;
  for (int64_t j = 0; j < S; ++j) q[j] = int8_t(std::min(127, nearest_int(inverse * x[j])));
  for (int64_t g = 0; g < S / 16; ++g) {
    int sum = 0;
    for (int64_t j = 0; j < 16; ++j) sum += q[g * 16 + j];
    sums[g] = int16_t(sum);
  }
  scale = 1 / inverse;
}

// Into `a`, whose arrays keep their memory from call to call.
void quantize_q8k(const float* x, int64_t M, int64_t K, Q8K& a) {
  a.blocks = K / S;
  a.scales.resize(size_t(M * a.blocks));
  a.levels.resize(size_t(M * K));
  a.sums.resize(size_t(M * K / 16));
  for (int64_t b = 0; b < M * a.blocks; ++b)
    quantize_block_q8k(x + b * S, a.scales[size_t(b)], a.levels.data() + b * S, a.sums.data() + b * (S / 16));
}

// The formats' shapes: Q2_K, Q3_K and Q6_K scale each 16 values, Q4_K and
// Q5_K each 32; Q2_K, Q4_K and Q5_K subtract a minimum per sub-block.
constexpr bool scales_16_values(QuantFormat F) { return F <= QuantFormat::q3_k || F == QuantFormat::q6_k; }
constexpr bool has_minimums(QuantFormat F) { return F != QuantFormat::q3_k && F != QuantFormat::q6_k; }

// One weight block's decoded parts: its scales, and where there are minimums, their term.
struct KBlock {
  float d, dmin;
  uint8_t k4_scales[8];        // Q4_K, Q5_K: 8 scales of 32 values
  int8_t k16_scales[16];       // Q2_K, Q3_K: 16 scales of 16 values (Q3_K's signed)
  const int8_t* q6_scales;     // Q6_K: 16 signed scales of 16 values, in the block
  int32_t min_term = 0;        // sum over sub-blocks of minimum * sum of the activation levels there
};

template <QuantFormat F>
inline int32_t sub_scale(const KBlock& k, int i) {
  if constexpr (F == QuantFormat::q6_k) return k.q6_scales[i];
  if constexpr (scales_16_values(F)) return k.k16_scales[i];
  return k.k4_scales[i];
}

// The minimums' integer sum: 8 minimums of 32 values (Q4_K, Q5_K) or 16 of
// 16 (Q2_K) against Q8_K's sums of 16 activation levels; each path its own
// way, the same integer.
struct ScalarMinTerm {
  static int32_t of8(const uint8_t* mins, const int16_t* act_sums) {
    int32_t total = 0;
    for (int i = 0; i < 8; ++i) total += int32_t(mins[i]) * (int32_t(act_sums[2 * i]) + int32_t(act_sums[2 * i + 1]));
    return total;
  }
  static int32_t of16(const uint8_t* mins, const int16_t* act_sums) {
    int32_t total = 0;
    for (int i = 0; i < 16; ++i) total += int32_t(mins[i]) * int32_t(act_sums[i]);
    return total;
  }
};

template <QuantFormat F, typename MinTerm>
inline KBlock decode_block(const uint8_t* x, const int16_t* act_sums) {
  KBlock k{};
  if constexpr (F == QuantFormat::q2_k) {  // {scales[16] (scale | min << 4), qs[64], d, dmin}
    k.d = half_at(x + 80);
    k.dmin = half_at(x + 82);
    uint8_t mins[16];
    for (int i = 0; i < 16; ++i) k.k16_scales[i] = int8_t(x[i] & 0xf), mins[i] = x[i] >> 4;
    k.min_term = MinTerm::of16(mins, act_sums);
  } else if constexpr (F == QuantFormat::q3_k) {  // {hmask[32], qs[64], scales[12], d}
    k.d = half_at(x + 108);
    k3_scales(x + 96, k.k16_scales);
  } else if constexpr (F == QuantFormat::q6_k) {
    k.d = half_at(x + 208);
    k.q6_scales = reinterpret_cast<const int8_t*>(x + 192);
  } else {
    k.d = half_at(x);
    k.dmin = half_at(x + 2);
    uint8_t mins[8];
    k4_scales_mins(x + 4, k.k4_scales, mins);
    k.min_term = MinTerm::of8(mins, act_sums);
  }
  return k;
}

// The unsigned levels of chunk c (32 values, 0 <= c < 8) of a block, and
// the level the format's zero sits at (Q3_K's 4, Q6_K's 32; the K-quants
// with minimums have none: their term is min_term).
template <QuantFormat F>
inline void chunk_levels(const uint8_t* x, int c, uint8_t* out) {
  if constexpr (F == QuantFormat::q2_k || F == QuantFormat::q3_k) {  // 2 bits at 2 (c % 4) of byte l of 32 (c / 4)
    const uint8_t* q = x + (F == QuantFormat::q2_k ? 16 : 32) + (c / 4) * 32;
    for (int l = 0; l < 32; ++l) {
      out[l] = uint8_t((q[l] >> (2 * (c % 4))) & 3);
      if constexpr (F == QuantFormat::q3_k) out[l] |= uint8_t(((x[l] >> c) & 1) << 2);  // hmask's bit c
    }
  } else if constexpr (F == QuantFormat::q4_k) {
    const uint8_t* q = x + 16 + (c / 2) * 32;
    for (int l = 0; l < 32; ++l) out[l] = c % 2 ? q[l] >> 4 : q[l] & 0xf;
  } else if constexpr (F == QuantFormat::q5_k) {
    const uint8_t* qh = x + 16;
    const uint8_t* q = x + 48 + (c / 2) * 32;
    for (int l = 0; l < 32; ++l) out[l] = uint8_t((c % 2 ? q[l] >> 4 : q[l] & 0xf) | (((qh[l] >> c) & 1) << 4));
  } else {  // Q6_K: chunk c of half h = c / 4: low nibbles of ql[0..31] or ql[32..63] (c % 4 = 0, 1), then high ones
    const uint8_t* ql = x + (c / 4) * 64;
    const uint8_t* qh = x + 128 + (c / 4) * 32;
    const int k = c % 4;
    for (int l = 0; l < 32; ++l)
      out[l] = uint8_t(((k < 2 ? ql[l + 32 * k] & 0xf : ql[l + 32 * (k - 2)] >> 4)) | (((qh[l] >> (2 * k)) & 3) << 4));
  }
}

// Which sub-block scale lane l of chunk c multiplies.
template <QuantFormat F>
inline int scale_index(int c, int l) {
  if constexpr (scales_16_values(F)) return 2 * c + l / 4;
  return c;
}

constexpr int zero_level(QuantFormat F) { return F == QuantFormat::q6_k ? 32 : F == QuantFormat::q3_k ? 4 : 0; }

// The reference: every path gives these bits.
template <QuantFormat F>
float dot_scalar(const uint8_t* w, const Q8K& a, int64_t m) {
  const int64_t bytes = k_block_bytes(F);
  float acc[8] = {}, minimums = 0;
  for (int64_t b = 0; b < a.blocks; ++b) {
    const uint8_t* x = w + b * bytes;
    const int8_t* q8 = a.levels.data() + (m * a.blocks + b) * S;
    const KBlock k = decode_block<F, ScalarMinTerm>(x, a.sums.data() + (m * a.blocks + b) * (S / 16));
    int32_t lanes[8] = {};
    for (int c = 0; c < 8; ++c) {
      uint8_t u[32];
      chunk_levels<F>(x, c, u);
      for (int l = 0; l < 8; ++l) {
        int32_t four = 0;
        for (int t = 0; t < 4; ++t) four += (int32_t(u[4 * l + t]) - zero_level(F)) * q8[c * 32 + 4 * l + t];
        lanes[l] += sub_scale<F>(k, scale_index<F>(c, l)) * four;
      }
    }
    const float scale = a.scales[size_t(m * a.blocks + b)];
    const float d = scale * k.d;
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, float(lanes[l]), acc[l]);
    if constexpr (has_minimums(F)) minimums = std::fma(-scale * k.dmin, float(k.min_term), minimums);
  }
  return sum_lanes(acc) + minimums;
}

#ifdef KILN_X86_INTRINSICS
// The minimums' term with SSE: the minimums times the sums of the
// activation levels (vpmaddwd; for 8 minimums of 32 values the sums first
// added by pairs, vphaddw), summed: exact, as the scalar loops.
struct SseMinTerm {
  [[gnu::always_inline]] static int32_t horizontal_sum(__m128i p) {
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0x4e));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0xb1));
    return _mm_cvtsi128_si32(p);
  }
  // m: Q4_K's or Q5_K's minimums as 16-bit integers (decode_simd's).
  [[gnu::always_inline]] static int32_t of8(__m128i m, const int16_t* act_sums) {
    const __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(act_sums)),
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(act_sums + 8)));
    return horizontal_sum(_mm_madd_epi16(m, pairs));
  }
  [[gnu::always_inline]] static int32_t of16(const uint8_t* mins, const int16_t* act_sums) {
    const __m128i m = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mins));
    const __m128i low = _mm_madd_epi16(_mm_cvtepu8_epi16(m), _mm_loadu_si128(reinterpret_cast<const __m128i*>(act_sums)));
    const __m128i high = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(m, 8)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(act_sums + 8)));
    return horizontal_sum(_mm_add_epi32(low, high));
  }
};

// Chunks 2i and 2i + 1 of a block's levels as two registers (unsigned, before Q6_K's zero).
template <QuantFormat F>
[[gnu::always_inline]] inline void chunk_pair(const uint8_t* x, int i, __m256i& first, __m256i& second) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  if constexpr (F == QuantFormat::q2_k || F == QuantFormat::q3_k) {  // chunks 2i, 2i + 1: bits 4 (i % 2) and + 2 of 32 (i / 2)
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + (F == QuantFormat::q2_k ? 16 : 32) + (i / 2) * 32));
    const __m256i two = _mm256_set1_epi8(0x03);
    first = _mm256_and_si256(_mm256_srli_epi16(bits, 4 * (i % 2)), two);
    second = _mm256_and_si256(_mm256_srli_epi16(bits, 4 * (i % 2) + 2), two);
    if constexpr (F == QuantFormat::q3_k) {  // hmask's bits 2i and 2i + 1, as 4
      const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
      const __m256i one = _mm256_set1_epi8(0x01);
      first = _mm256_or_si256(first, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 2 * i), one), 2));
      second = _mm256_or_si256(second, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 2 * i + 1), one), 2));
    }
  } else if constexpr (F == QuantFormat::q4_k || F == QuantFormat::q5_k) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + (F == QuantFormat::q4_k ? 16 : 48) + i * 32));
    first = _mm256_and_si256(bits, nibble);
    second = _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibble);
    if constexpr (F == QuantFormat::q5_k) {  // bit 2i and 2i + 1 of qh, as 16
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16));
      const __m256i bit = _mm256_set1_epi8(0x10);
      first = _mm256_or_si256(first, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * i), 4), bit));
      second = _mm256_or_si256(second, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * i + 1), 4), bit));
    }
  } else {  // Q6_K: pair i = chunks 2i, 2i + 1: half h = i / 2, k = 2 (i % 2) and k + 1
    const int h = i / 2, k = 2 * (i % 2);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 128 + h * 32));
    const __m256i two = _mm256_set1_epi8(0x03);
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + h * 64));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + h * 64 + 32));
    const __m256i low0 = k == 0 ? _mm256_and_si256(ql0, nibble) : _mm256_and_si256(_mm256_srli_epi16(ql0, 4), nibble);
    const __m256i low1 = k == 0 ? _mm256_and_si256(ql1, nibble) : _mm256_and_si256(_mm256_srli_epi16(ql1, 4), nibble);
    const __m256i high0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), two), 4);
    const __m256i high1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k + 2), two), 4);
    first = _mm256_or_si256(low0, high0);
    second = _mm256_or_si256(low1, high1);
  }
}

// Lanes of a chunk times its scales: AVX2's pairs (vpmaddubsw), then the
// scales (vpmaddwd: each pair of 16-bit sums times the scale of its lane).
template <QuantFormat F>
[[gnu::always_inline]] inline __m256i scaled_lanes_avx2(__m256i u, const int8_t* q8, __m256i scales16) {
  const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
  __m256i pairs = _mm256_maddubs_epi16(u, s);
  if constexpr (zero_level(F) != 0)  // (u - 32) q8 = u q8 - 32 q8
    pairs = _mm256_sub_epi16(pairs, _mm256_maddubs_epi16(_mm256_set1_epi8(zero_level(F)), s));
  return _mm256_madd_epi16(pairs, scales16);
}

// A block's parts on the SIMD paths: its sub-block scales as 16-bit
// integers (Q4_K's and Q5_K's eight in elements 0-7, the others' sixteen),
// so that a chunk's scales are one shuffle away instead of a byte each
// taken out and broadcast.
struct SimdBlock {
  float d, dmin;
  __m256i scales;
  int32_t min_term;
};

template <QuantFormat F>
[[gnu::always_inline]] inline SimdBlock decode_simd(const uint8_t* x, const int16_t* act_sums) {
  if constexpr (F == QuantFormat::q4_k || F == QuantFormat::q5_k) {
    const K4ScaleWords w = k4_scale_words(x + 4);
    const __m128i mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, int(w.mins[1]), int(w.mins[0])));
    const __m128i scales = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, int(w.scales[1]), int(w.scales[0])));
    return {half_at(x), half_at(x + 2), _mm256_zextsi128_si256(scales), SseMinTerm::of8(mins, act_sums)};
  } else {
    const KBlock k = decode_block<F, SseMinTerm>(x, act_sums);
    const int8_t* scales = F == QuantFormat::q6_k ? k.q6_scales : k.k16_scales;
    return {k.d, k.dmin, _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales))), k.min_term};
  }
}

// The 16-bit scales of chunk c's eight lanes, each twice (one per 16-bit
// pair): the 32-bit word that holds them, then its halves.
template <QuantFormat F>
[[gnu::always_inline]] inline __m256i chunk_scales16(__m256i scales, int c) {
  if constexpr (scales_16_values(F)) {  // scale 2c for lanes 0-3 (the low 128 bits), 2c + 1 for 4-7: word c
    const __m256i word = _mm256_permutevar8x32_epi32(scales, _mm256_set1_epi32(c));
    return _mm256_shuffle_epi8(word, _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                                      2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
  } else {  // scale c: half c % 2 of word c / 2
    const __m256i word = _mm256_permutevar8x32_epi32(scales, _mm256_set1_epi32(c / 2));
    const int byte = 2 * (c % 2);
    return _mm256_shuffle_epi8(word, _mm256_set1_epi16(int16_t(byte | (byte + 1) << 8)));
  }
}

// A block's eight int32 lanes on each instruction path. AVX2: chunk by
// chunk; AVX-512: a pair of chunks in one register (vpmaddubsw and vpmaddwd
// on 64 values), the halves added.
struct Avx2Lanes {
  template <QuantFormat F>
  static __m256i block(const uint8_t* x, const int8_t* q8, __m256i scales) {
    __m256i lanes = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      __m256i first, second;
      chunk_pair<F>(x, i, first, second);
      lanes = _mm256_add_epi32(lanes, scaled_lanes_avx2<F>(first, q8 + 64 * i, chunk_scales16<F>(scales, 2 * i)));
      lanes = _mm256_add_epi32(lanes, scaled_lanes_avx2<F>(second, q8 + 64 * i + 32, chunk_scales16<F>(scales, 2 * i + 1)));
    }
    return lanes;
  }
};

struct Avx512Lanes {
  // Which 16-bit scale each element of a pair of chunks takes (vpermw's
  // indices for pair 0; pair i adds 2i, or 4i with sixteen scales).
  static constexpr int16_t kPairScale8[32] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                               1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  static constexpr int16_t kPairScale16[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  template <QuantFormat F>
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static __m256i block(const uint8_t* x, const int8_t* q8,
                                                                                __m256i scales) {
    const __m512i pair0 = _mm512_loadu_si512(scales_16_values(F) ? kPairScale16 : kPairScale8);
    const __m512i all_scales = _mm512_castsi256_si512(scales);
    __m512i lanes = _mm512_setzero_si512();
    for (int i = 0; i < 4; ++i) {
      __m256i first, second;
      chunk_pair<F>(x, i, first, second);
      const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(first), second, 1);
      const __m512i s = _mm512_loadu_si512(q8 + 64 * i);
      __m512i pairs = _mm512_maddubs_epi16(u, s);
      if constexpr (zero_level(F) != 0)
        pairs = _mm512_sub_epi16(pairs, _mm512_maddubs_epi16(_mm512_set1_epi8(zero_level(F)), s));
      const __m512i index = _mm512_add_epi16(pair0, _mm512_set1_epi16(int16_t(i * (scales_16_values(F) ? 4 : 2))));
      const __m512i scales16 = _mm512_permutexvar_epi16(index, all_scales);
      lanes = _mm512_add_epi32(lanes, _mm512_madd_epi16(pairs, scales16));
    }
    return _mm256_add_epi32(_mm512_castsi512_si256(lanes), _mm512_extracti64x4_epi64(lanes, 1));
  }
};

// One output on a SIMD path: the scalar reference's f32 steps on `Lanes`' integer lanes.
template <QuantFormat F, typename Lanes>
inline float dot_simd(const uint8_t* w, const Q8K& a, int64_t m) {
  const int64_t bytes = k_block_bytes(F);
  __m256 acc = _mm256_setzero_ps();
  float minimums = 0;
  for (int64_t b = 0; b < a.blocks; ++b) {
    const uint8_t* x = w + b * bytes;
    for (int64_t line = 0; line < bytes; line += 64) prefetch_ahead(x + line);
    const SimdBlock k = decode_simd<F>(x, a.sums.data() + (m * a.blocks + b) * (S / 16));
    const __m256i lanes = Lanes::template block<F>(x, a.levels.data() + (m * a.blocks + b) * S, k.scales);
    const float scale = a.scales[size_t(m * a.blocks + b)];
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale * k.d), _mm256_cvtepi32_ps(lanes), acc);
    if constexpr (has_minimums(F)) minimums = std::fma(-scale * k.dmin, float(k.min_term), minimums);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, acc);
  return sum_lanes(lanes) + minimums;
}
#endif

// Each path's dot as a type, so the loops below call it directly (and flatten inlines it).
template <QuantFormat F>
struct ScalarDot {
  float operator()(const uint8_t* w, const Q8K& a, int64_t m) const { return dot_scalar<F>(w, a, m); }
};
#ifdef KILN_X86_INTRINSICS
template <QuantFormat F, typename Lanes>
struct SimdDot {
  float operator()(const uint8_t* w, const Q8K& a, int64_t m) const { return dot_simd<F, Lanes>(w, a, m); }
};
#endif

// Rows n0 .. n1 of w against all M activation rows, one output at a time.
template <typename Dot>
inline void rows_with(Dot dot, const QuantizedMatrix& w, int64_t n0, int64_t n1, const Q8K& a, int64_t M, float* out) {
  const uint8_t* data = w.data.data<uint8_t>();
  const int64_t row_bytes = w.data.numel() / w.rows;
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) out[m * w.rows + n] = dot(data + n * row_bytes, a, m);
}

#ifdef KILN_X86_INTRINSICS
// Each path's loops flattened, so everything inlines into its instruction set.
template <QuantFormat F>
[[gnu::flatten]] void rows_avx2(const QuantizedMatrix& w, int64_t n0, int64_t n1, const Q8K& a, int64_t M, float* out) {
  rows_with(SimdDot<F, Avx2Lanes>{}, w, n0, n1, a, M, out);
}
template <QuantFormat F>
[[gnu::flatten, gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] void rows_avx512(
    const QuantizedMatrix& w, int64_t n0, int64_t n1, const Q8K& a, int64_t M, float* out) {
  rows_with(SimdDot<F, Avx512Lanes>{}, w, n0, n1, a, M, out);
}
#endif

template <QuantFormat F>
void rows(QuantDot dot, const QuantizedMatrix& w, int64_t n0, int64_t n1, const Q8K& a, int64_t M, float* out) {
#ifdef KILN_X86_INTRINSICS
  if (dot == QuantDot::avx512_vnni) return rows_avx512<F>(w, n0, n1, a, M, out);
  if (dot == QuantDot::avx2) return rows_avx2<F>(w, n0, n1, a, M, out);
#endif
  rows_with(ScalarDot<F>{}, w, n0, n1, a, M, out);
}

}  // namespace

void kquant_matmul_rows(const float* x, int64_t M, const QuantizedMatrix& w, float* out, QuantDot dot) {
  KILN_CHECK(w.k_quant() && w.cols % S == 0, "kquant_matmul: ", quant_format_name(w.format), " weights of ", w.cols,
             " columns are not K-quant blocks");
  thread_local Q8K kept;
  Q8K& a = kept;  // (named in the loop below, kept would be each worker thread's own)
  quantize_q8k(x, M, w.cols, a);
  for_row_chunks(w.rows, M * w.rows * w.cols, [&](int64_t n0, int64_t n1) {
    switch (w.format) {
      case QuantFormat::q2_k: return rows<QuantFormat::q2_k>(dot, w, n0, n1, a, M, out);
      case QuantFormat::q3_k: return rows<QuantFormat::q3_k>(dot, w, n0, n1, a, M, out);
      case QuantFormat::q4_k: return rows<QuantFormat::q4_k>(dot, w, n0, n1, a, M, out);
      case QuantFormat::q5_k: return rows<QuantFormat::q5_k>(dot, w, n0, n1, a, M, out);
      default: return rows<QuantFormat::q6_k>(dot, w, n0, n1, a, M, out);
    }
  });
}

namespace {
template <QuantFormat F>
void row_levels(const uint8_t* row, int64_t blocks, int8_t* levels, float* scales, float* mins) {
  constexpr int64_t per_block = S / sub_block_values(F);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* x = row + b * k_block_bytes(F);
    static constexpr int16_t kNoSums[16] = {};  // (the minimums' term with activations: unused here)
    const KBlock k = decode_block<F, ScalarMinTerm>(x, kNoSums);
    uint8_t block_mins[16] = {};
    if constexpr (F == QuantFormat::q2_k)
      for (int i = 0; i < 16; ++i) block_mins[i] = x[i] >> 4;
    else if constexpr (F == QuantFormat::q4_k || F == QuantFormat::q5_k) {
      uint8_t unused[8];
      k4_scales_mins(x + 4, unused, block_mins);
    }
    for (int c = 0; c < 8; ++c) {
      uint8_t u[32];
      chunk_levels<F>(x, c, u);
      for (int j = 0; j < 32; ++j) levels[b * S + c * 32 + j] = int8_t(int(u[j]) - zero_level(F));
    }
    for (int64_t i = 0; i < per_block; ++i) {
      scales[b * per_block + i] = k.d * float(sub_scale<F>(k, int(i)));
      if constexpr (has_minimums(F)) mins[b * per_block + i] = -k.dmin * float(block_mins[i]);
    }
  }
}
}  // namespace

void kquant_row_levels(const QuantizedMatrix& w, int64_t n, int8_t* levels, float* scales, float* mins) {
  const int64_t blocks = w.cols / S;
  const uint8_t* row = w.data.data<uint8_t>() + n * blocks * k_block_bytes(w.format);
  switch (w.format) {
    case QuantFormat::q2_k: return row_levels<QuantFormat::q2_k>(row, blocks, levels, scales, mins);
    case QuantFormat::q3_k: return row_levels<QuantFormat::q3_k>(row, blocks, levels, scales, mins);
    case QuantFormat::q4_k: return row_levels<QuantFormat::q4_k>(row, blocks, levels, scales, mins);
    case QuantFormat::q5_k: return row_levels<QuantFormat::q5_k>(row, blocks, levels, scales, mins);
    case QuantFormat::q6_k: return row_levels<QuantFormat::q6_k>(row, blocks, levels, scales, mins);
    default: KILN_CHECK(false, "kquant_row_levels: ", quant_format_name(w.format), " is not a K-quant");
  }
}

void round_to_q8k_levels(const float* x, int64_t M, int64_t K, float* out) {
  KILN_CHECK(K % S == 0, "round_to_q8k_levels: ", K, " values are not whole blocks of 256");
#pragma omp parallel for schedule(static) if (M * K >= (int64_t(1) << 16))
  for (int64_t b = 0; b < M * K / S; ++b) {
    float scale;
    int8_t q[S];
    int16_t sums[S / 16];
    quantize_block_q8k(x + b * S, scale, q, sums);
    for (int64_t j = 0; j < S; ++j) out[b * S + j] = scale * float(q[j]);
  }
}

}  // namespace kiln::cpu
