// Products with ggml's K-quants and IQ4_XS (kiln/core/quantized_k.h), as
// llama.cpp computes them: each activation row quantized per 256 values to int8 (its
// Q8_K: scale from the value of largest magnitude, and the sums of each 16
// levels), then per weight block the integer products of each sub-block
// times its integer scale, and one f32 multiply-add per block and lane.
//
// The lanes: lane l of a block's int32 sums holds bytes 4l .. 4l + 3 of
// every 32-value chunk of the block. AVX2 gets them from vpmaddubsw (pairs)
// and vpmaddwd with the sub-block's scale, then an add; AVX-512 VNNI does
// the last two in one vpdpwssd.
// Both are exact integers, so with the same f32 steps after them (one fused
// multiply-add per lane and block, the lanes summed in a fixed order, the
// minimums as MinSum says) every path, the scalar one included, gives the
// same bits: ggml's AVX2 vec_dot's (bench/hf/kquant_vs_ggml.sh checks).
// Nothing saturates: levels stop at 63, activations at +-127, so a pair of
// byte products is at most 2 * 63 * 127 < 2^15. IQ4_XS's looked-up levels
// reach +-127: they go in as |level|, their signs moved onto the activations
// (vpsignb), a pair at most 2 * 127 * 127 < 2^15.
#include "kiln/cpu/kquant_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/core/quantized_k.h"
#include "kiln/cpu/kquant_lanes.h"
#include "kiln/cpu/kquant_row_group.h"
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

// The formats' shapes: Q2_K, Q3_K and Q6_K scale each 16 values, Q4_K,
// Q5_K and IQ4_XS each 32; Q2_K, Q4_K and Q5_K subtract a minimum per sub-block.
constexpr bool scales_16_values(QuantFormat F) { return sub_block_values(F) == 16; }

// How the minimums' term (an integer per pair of sub-blocks: minimum times
// the activations' sum there) joins the f32 sums, each format as ggml's
// AVX2 vec_dot adds it: eight lanes into the block's accumulator before its
// levels (Q2_K), four lanes in an accumulator of their own (Q4_K), or their
// integer sum into one f32 (Q5_K).
enum class MinSum { none, eight_lanes, four_lanes, one_sum };
constexpr MinSum min_sum(QuantFormat F) {
  return F == QuantFormat::q2_k   ? MinSum::eight_lanes
         : F == QuantFormat::q4_k ? MinSum::four_lanes
         : F == QuantFormat::q5_k ? MinSum::one_sum
                                  : MinSum::none;
}
constexpr bool has_minimums(QuantFormat F) { return min_sum(F) != MinSum::none; }

// One weight block's decoded parts: its scales, and its minimums where it has them.
struct KBlock {
  float d, dmin;
  uint8_t k4_scales[8];        // Q4_K, Q5_K: 8 scales of 32 values
  int8_t k16_scales[16];       // Q2_K, Q3_K: 16 scales of 16 values (Q3_K's signed)
  const int8_t* q6_scales;     // Q6_K: 16 signed scales of 16 values, in the block
  int8_t xs_scales[8];         // IQ4_XS: 8 signed scales of 32 values
  uint8_t mins[16];            // Q2_K: 16 minimums of 16 values; Q4_K, Q5_K: 8 of 32
};

template <QuantFormat F>
inline int32_t sub_scale(const KBlock& k, int i) {
  if constexpr (F == QuantFormat::q6_k) return k.q6_scales[i];
  if constexpr (F == QuantFormat::iq4_xs) return k.xs_scales[i];
  if constexpr (scales_16_values(F)) return k.k16_scales[i];
  return k.k4_scales[i];
}

// The minimums' term in int32 lanes, as vpmaddwd leaves them, against
// Q8_K's sums of 16 activation levels: 8 minimums of 32 values (Q4_K, Q5_K:
// lane j takes minimums 2j and 2j + 1) or 16 of 16 (Q2_K: the same, 8 lanes).
void min_lanes_of8(const uint8_t* mins, const int16_t* act_sums, int32_t* lanes) {
  for (int i = 0; i < 8; ++i)
    lanes[i / 2] += int32_t(mins[i]) * (int32_t(act_sums[2 * i]) + int32_t(act_sums[2 * i + 1]));
}
void min_lanes_of16(const uint8_t* mins, const int16_t* act_sums, int32_t* lanes) {
  for (int i = 0; i < 16; ++i) lanes[i / 2] += int32_t(mins[i]) * int32_t(act_sums[i]);
}

// An output: its lanes' sum, with the minimums' as MinSum says (four lanes
// summed as ggml sums its acc_m).
template <QuantFormat F>
inline float with_minimums(float lanes, const float* four, float one) {
  if constexpr (min_sum(F) == MinSum::four_lanes) return lanes + ((four[0] + four[2]) + (four[1] + four[3]));
  if constexpr (min_sum(F) == MinSum::one_sum) return lanes + one;
  return lanes;
}

template <QuantFormat F>
inline KBlock decode_block(const uint8_t* x) {
  KBlock k{};
  if constexpr (F == QuantFormat::q2_k) {  // {scales[16] (scale | min << 4), qs[64], d, dmin}
    k.d = half_at(x + 80);
    k.dmin = half_at(x + 82);
    for (int i = 0; i < 16; ++i) k.k16_scales[i] = int8_t(x[i] & 0xf), k.mins[i] = x[i] >> 4;
  } else if constexpr (F == QuantFormat::q3_k) {  // {hmask[32], qs[64], scales[12], d}
    k.d = half_at(x + 108);
    k3_scales(x + 96, k.k16_scales);
  } else if constexpr (F == QuantFormat::q6_k) {
    k.d = half_at(x + 208);
    k.q6_scales = reinterpret_cast<const int8_t*>(x + 192);
  } else if constexpr (F == QuantFormat::iq4_xs) {  // {d, scales_h, scales_l[4], qs[128]}
    k.d = half_at(x);
    iq4_xs_scales(x, k.xs_scales);
  } else {
    k.d = half_at(x);
    k.dmin = half_at(x + 2);
    k4_scales_mins(x + 4, k.k4_scales, k.mins);
  }
  return k;
}

// The unsigned levels of chunk c (32 values, 0 <= c < 8) of a block (IQ4_XS:
// its indices into kIq4nlValues), and the level the format's zero sits at
// (Q3_K's 4, Q6_K's 32; the K-quants with minimums have none: their term is
// the minimums' lanes).
template <QuantFormat F>
inline void chunk_levels(const uint8_t* x, int c, uint8_t* out) {
  if constexpr (F == QuantFormat::q2_k || F == QuantFormat::q3_k) {  // 2 bits at 2 (c % 4) of byte l of 32 (c / 4)
    const uint8_t* q = x + (F == QuantFormat::q2_k ? 16 : 32) + (c / 4) * 32;
    for (int l = 0; l < 32; ++l) {
      out[l] = uint8_t((q[l] >> (2 * (c % 4))) & 3);
      if constexpr (F == QuantFormat::q3_k) out[l] |= uint8_t(((x[l] >> c) & 1) << 2);  // hmask's bit c
    }
  } else if constexpr (F == QuantFormat::iq4_xs) {  // int4's packing: value l low, l + 16 high, 16 bytes a chunk
    const uint8_t* q = x + 8 + c * 16;
    for (int l = 0; l < 16; ++l) out[l] = q[l] & 0xf, out[l + 16] = q[l] >> 4;
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
// Where the zero level comes off, as ggml takes it: off each byte product
// (Q3_K), or off each lane through the activations' sums of 16 (Q6_K: lane
// l less 32 (sum 2l * scale 2l + sum 2l+1 * scale 2l+1)).
constexpr bool zero_by_sums(QuantFormat F) { return F == QuantFormat::q6_k; }
constexpr int byte_zero(QuantFormat F) { return zero_by_sums(F) ? 0 : zero_level(F); }
// A level as the byte products take it: IQ4_XS's looked up, the others less their byte_zero (`zero`).
template <QuantFormat F>
inline int32_t signed_level(uint8_t u, int zero) {
  if constexpr (F == QuantFormat::iq4_xs) return kIq4nlValues[u];
  return int32_t(u) - zero;
}

// The reference: every path gives these bits.
template <QuantFormat F>
float dot_scalar(const uint8_t* w, const Q8K& a, int64_t m) {
  const int64_t bytes = k_block_bytes(F);
  float acc[8] = {}, four[4] = {}, one = 0;
  for (int64_t b = 0; b < a.blocks; ++b) {
    const uint8_t* x = w + b * bytes;
    const int8_t* q8 = a.levels.data() + (m * a.blocks + b) * S;
    const int16_t* act_sums = a.sums.data() + (m * a.blocks + b) * (S / 16);
    const KBlock k = decode_block<F>(x);
    int32_t lanes[8] = {}, min_lanes[8] = {};
    if constexpr (F == QuantFormat::q2_k) min_lanes_of16(k.mins, act_sums, min_lanes);
    else if constexpr (has_minimums(F)) min_lanes_of8(k.mins, act_sums, min_lanes);
    for (int c = 0; c < 8; ++c) {
      uint8_t u[32];
      chunk_levels<F>(x, c, u);
      for (int l = 0; l < 8; ++l) {
        int32_t sum = 0;
        for (int t = 0; t < 4; ++t) sum += signed_level<F>(u[4 * l + t], byte_zero(F)) * q8[c * 32 + 4 * l + t];
        lanes[l] += sub_scale<F>(k, scale_index<F>(c, l)) * sum;
      }
    }
    if constexpr (zero_by_sums(F))
      for (int l = 0; l < 8; ++l)
        lanes[l] -= zero_level(F) *
                    (act_sums[2 * l] * sub_scale<F>(k, 2 * l) + act_sums[2 * l + 1] * sub_scale<F>(k, 2 * l + 1));
    const float scale = a.scales[size_t(m * a.blocks + b)];
    const float d = scale * k.d, dmin = -scale * k.dmin;
    if constexpr (min_sum(F) == MinSum::eight_lanes)
      for (int l = 0; l < 8; ++l) acc[l] = std::fma(dmin, float(min_lanes[l]), acc[l]);
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, float(lanes[l]), acc[l]);
    if constexpr (min_sum(F) == MinSum::four_lanes)
      for (int j = 0; j < 4; ++j) four[j] = std::fma(dmin, float(min_lanes[j]), four[j]);
    if constexpr (min_sum(F) == MinSum::one_sum)
      one = std::fma(dmin, float(min_lanes[0] + min_lanes[1] + min_lanes[2] + min_lanes[3]), one);
  }
  return with_minimums<F>(sum_lanes(acc), four, one);
}

#ifdef KILN_X86_INTRINSICS
// Sixteen 16-bit values times the activations' sums of 16, by pairs (vpmaddwd): eight lanes.
[[gnu::always_inline]] inline __m256i times_act_sums(__m256i values16, const int16_t* act_sums) {
  return _mm256_madd_epi16(values16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act_sums)));
}
// min_lanes_of8's four lanes (the activations' sums first added by pairs, vphaddw).
[[gnu::always_inline]] inline __m128i min_lanes_of8_sse(__m128i mins16, const int16_t* act_sums) {
  const __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(act_sums)),
                                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(act_sums + 8)));
  return _mm_madd_epi16(mins16, pairs);
}

// Each byte's bits from bit From moved to bit To, and masked: one 16-bit
// shift (the other byte's bits that cross over are masked off).
template <int From, int To>
[[gnu::always_inline]] inline __m256i move_bits(__m256i v, __m256i mask) {
  if constexpr (To > From) return _mm256_and_si256(_mm256_slli_epi16(v, To - From), mask);
  if constexpr (To < From) return _mm256_and_si256(_mm256_srli_epi16(v, From - To), mask);
  return _mm256_and_si256(v, mask);
}

// Chunks 2i and 2i + 1 of a block's levels as two registers (unsigned, before
// Q6_K's zero; IQ4_XS's signed, looked up).
template <QuantFormat F, int i>
[[gnu::always_inline]] inline void chunk_pair(const uint8_t* x, __m256i& first, __m256i& second) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  if constexpr (F == QuantFormat::q2_k || F == QuantFormat::q3_k) {  // chunks 2i, 2i + 1: bits 4 (i % 2) and + 2 of 32 (i / 2)
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + (F == QuantFormat::q2_k ? 16 : 32) + (i / 2) * 32));
    const __m256i two = _mm256_set1_epi8(0x03);
    first = _mm256_and_si256(_mm256_srli_epi16(bits, 4 * (i % 2)), two);
    second = _mm256_and_si256(_mm256_srli_epi16(bits, 4 * (i % 2) + 2), two);
    if constexpr (F == QuantFormat::q3_k) {  // hmask's bits 2i and 2i + 1, as 4
      const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
      const __m256i four = _mm256_set1_epi8(0x04);
      first = _mm256_or_si256(first, move_bits<2 * i, 2>(hm, four));
      second = _mm256_or_si256(second, move_bits<2 * i + 1, 2>(hm, four));
    }
  } else if constexpr (F == QuantFormat::q4_k || F == QuantFormat::q5_k) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + (F == QuantFormat::q4_k ? 16 : 48) + i * 32));
    first = _mm256_and_si256(bits, nibble);
    second = _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibble);
    if constexpr (F == QuantFormat::q5_k) {  // bit 2i and 2i + 1 of qh, as 16
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16));
      const __m256i bit = _mm256_set1_epi8(0x10);
      first = _mm256_or_si256(first, move_bits<2 * i, 4>(qh, bit));
      second = _mm256_or_si256(second, move_bits<2 * i + 1, 4>(qh, bit));
    }
  } else if constexpr (F == QuantFormat::iq4_xs) {  // chunk 2i's 16 bytes, then 2i + 1's: low nibbles, high ones
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 + i * 32));
    const __m256i low = _mm256_and_si256(bits, nibble), high = _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibble);
    const __m256i values =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    first = _mm256_shuffle_epi8(values, _mm256_permute2x128_si256(low, high, 0x20));
    second = _mm256_shuffle_epi8(values, _mm256_permute2x128_si256(low, high, 0x31));
  } else {  // Q6_K: pair i = chunks 2i, 2i + 1: half h = i / 2, k = 2 (i % 2) and k + 1
    constexpr int h = i / 2, k = 2 * (i % 2);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 128 + h * 32));
    const __m256i high_bits = _mm256_set1_epi8(0x30);
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + h * 64));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + h * 64 + 32));
    const __m256i low0 = k == 0 ? _mm256_and_si256(ql0, nibble) : _mm256_and_si256(_mm256_srli_epi16(ql0, 4), nibble);
    const __m256i low1 = k == 0 ? _mm256_and_si256(ql1, nibble) : _mm256_and_si256(_mm256_srli_epi16(ql1, 4), nibble);
    first = _mm256_or_si256(low0, move_bits<2 * k, 4>(qh, high_bits));
    second = _mm256_or_si256(low1, move_bits<2 * k + 2, 4>(qh, high_bits));
  }
}

// A block's parts on the SIMD paths. Each sub-block scale is a 16-bit pair
// (s | s << 16) in a 32-bit word, which vpmaddwd multiplies both sums of a
// lane by: a chunk's scales are one vpermd away (of 16 values: a chunk's
// lanes 0-3 take one, 4-7 the next).
struct SimdBlock {
  float d, dmin;
  __m256i scale_pairs[2];  // scales 0-7, 8-15
  __m256i min_lanes;       // dot_scalar's min_lanes
  __m256i zero_lanes;      // Q6_K: what its zero takes off each lane
};

[[gnu::always_inline]] inline __m128i low_bytes(const void* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}

template <QuantFormat F>
[[gnu::always_inline]] inline void decode_simd(const uint8_t* x, const int16_t* act_sums, SimdBlock& k) {
  if constexpr (F == QuantFormat::q4_k || F == QuantFormat::q5_k) {
    const K4ScaleWords w = k4_scale_words(x + 4);
    k.d = half_at(x);
    k.dmin = half_at(x + 2);
    k.scale_pairs[0] = word_pairs(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, int(w.scales[1]), int(w.scales[0]))));
    k.min_lanes = _mm256_zextsi128_si256(
        min_lanes_of8_sse(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, int(w.mins[1]), int(w.mins[0]))), act_sums));
  } else if constexpr (F == QuantFormat::q2_k) {  // scale | min << 4 per byte
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
    const __m128i scales = _mm_and_si128(packed, _mm_set1_epi8(0x0f));
    k.d = half_at(x + 80);
    k.dmin = half_at(x + 82);
    k.scale_pairs[0] = word_pairs(_mm256_cvtepu8_epi32(scales));
    k.scale_pairs[1] = word_pairs(_mm256_cvtepu8_epi32(_mm_srli_si128(scales, 8)));
    k.min_lanes =
        times_act_sums(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0f))), act_sums);
  } else if constexpr (F == QuantFormat::iq4_xs) {  // iq4_xs_scales in lanes: nibble i of scales_l, bits 2i of scales_h
    uint32_t low;
    uint16_t high;
    std::memcpy(&high, x + 2, 2);
    std::memcpy(&low, x + 4, 4);
    const __m128i packed = _mm_cvtsi32_si128(int(low)), nibble = _mm_set1_epi8(0x0f);
    const __m128i nibbles =
        _mm_unpacklo_epi8(_mm_and_si128(packed, nibble), _mm_and_si128(_mm_srli_epi16(packed, 4), nibble));
    const __m256i top = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(high), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)), _mm256_set1_epi32(3));
    k.d = half_at(x);
    k.scale_pairs[0] = word_pairs(_mm256_sub_epi32(
        _mm256_or_si256(_mm256_cvtepu8_epi32(nibbles), _mm256_slli_epi32(top, 4)), _mm256_set1_epi32(32)));
  } else {
    int8_t q3[16];
    const int8_t* scales = reinterpret_cast<const int8_t*>(x + 192);  // Q6_K's
    if constexpr (F == QuantFormat::q3_k) k3_scales(x + 96, q3), scales = q3;
    k.d = half_at(x + (F == QuantFormat::q3_k ? 108 : 208));
    k.scale_pairs[0] = word_pairs(_mm256_cvtepi8_epi32(low_bytes(scales)));
    k.scale_pairs[1] = word_pairs(_mm256_cvtepi8_epi32(low_bytes(scales + 8)));
    if constexpr (zero_by_sums(F)) {
      static_assert(zero_level(F) == 32);
      const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
      k.zero_lanes = _mm256_slli_epi32(times_act_sums(scales16, act_sums), 5);
    }
  }
}

// Chunk c's scale pairs, lane by lane.
template <QuantFormat F, int c>
[[gnu::always_inline]] inline __m256i chunk_scales(const SimdBlock& k) {
  if constexpr (scales_16_values(F)) {
    constexpr int at = 2 * (c % 4);
    return _mm256_permutevar8x32_epi32(k.scale_pairs[c / 4],
                                       _mm256_setr_epi32(at, at, at, at, at + 1, at + 1, at + 1, at + 1));
  } else {
    return _mm256_permutevar8x32_epi32(k.scale_pairs[0], _mm256_set1_epi32(c));
  }
}

// Chunk c's byte products by pairs (vpmaddubsw; IQ4_XS's signed levels as
// |level| against signed activations), less Q3_K's zero level times the
// activations ((u - 4) q8 = u q8 - 4 q8), added to the lanes with its scales.
template <QuantFormat F, typename Lanes, int c>
[[gnu::always_inline]] inline __m256i add_chunk(__m256i lanes, __m256i u, const int8_t* q8, const SimdBlock& k) {
  const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * c));
  __m256i pairs = F == QuantFormat::iq4_xs ? _mm256_maddubs_epi16(_mm256_sign_epi8(u, u), _mm256_sign_epi8(s, u))
                                           : _mm256_maddubs_epi16(u, s);
  if constexpr (byte_zero(F) != 0)
    pairs = _mm256_sub_epi16(pairs, _mm256_maddubs_epi16(_mm256_set1_epi8(byte_zero(F)), s));
  return Lanes::add_scaled(lanes, pairs, chunk_scales<F, c>(k));
}

template <QuantFormat F, typename Lanes, int i>
[[gnu::always_inline]] inline void add_chunk_pair(__m256i& even, __m256i& odd, const uint8_t* x, const int8_t* q8,
                                                  const SimdBlock& k) {
  __m256i first, second;
  chunk_pair<F, i>(x, first, second);
  even = add_chunk<F, Lanes, 2 * i>(even, first, q8, k);
  odd = add_chunk<F, Lanes, 2 * i + 1>(odd, second, q8, k);
}

// One output on a SIMD path: the scalar reference's f32 steps on `Lanes`' integer lanes.
template <QuantFormat F, typename Lanes>
inline float dot_simd(const uint8_t* w, const Q8K& a, int64_t m) {
  constexpr int64_t bytes = k_block_bytes(F);
  __m256 acc = _mm256_setzero_ps();
  __m128 four = _mm_setzero_ps();
  float one = 0;
  SimdBlock k;
  for (int64_t b = 0; b < a.blocks; ++b) {
    const uint8_t* x = w + b * bytes;
    for (int64_t line = 0; line < bytes; line += 64) prefetch_ahead(x + line);
    decode_simd<F>(x, a.sums.data() + (m * a.blocks + b) * (S / 16), k);
    const int8_t* q8 = a.levels.data() + (m * a.blocks + b) * S;
    // The chunks in four chains (the same integers; with VNNI Q3_K ran 1.1x faster than with two, 1.25x than one).
    __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
    __m256i even2 = _mm256_setzero_si256(), odd2 = _mm256_setzero_si256();
    add_chunk_pair<F, Lanes, 0>(even, odd, x, q8, k);
    add_chunk_pair<F, Lanes, 1>(even2, odd2, x, q8, k);
    add_chunk_pair<F, Lanes, 2>(even, odd, x, q8, k);
    add_chunk_pair<F, Lanes, 3>(even2, odd2, x, q8, k);
    __m256i lanes = _mm256_add_epi32(_mm256_add_epi32(even, odd), _mm256_add_epi32(even2, odd2));
    if constexpr (zero_by_sums(F)) lanes = _mm256_sub_epi32(lanes, k.zero_lanes);
    const float scale = a.scales[size_t(m * a.blocks + b)];
    const float dmin = -scale * k.dmin;
    if constexpr (min_sum(F) == MinSum::eight_lanes)
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(k.min_lanes), acc);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale * k.d), _mm256_cvtepi32_ps(lanes), acc);
    const __m128i four_lanes = _mm256_castsi256_si128(k.min_lanes);
    if constexpr (min_sum(F) == MinSum::four_lanes)
      four = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(four_lanes), four);
    if constexpr (min_sum(F) == MinSum::one_sum) {
      __m128i total = _mm_add_epi32(four_lanes, _mm_shuffle_epi32(four_lanes, 0x4e));
      total = _mm_add_epi32(total, _mm_shuffle_epi32(total, 0xb1));
      one = std::fma(dmin, float(_mm_cvtsi128_si32(total)), one);
    }
  }
  float lanes[8], four_sums[4];
  _mm256_storeu_ps(lanes, acc);
  _mm_storeu_ps(four_sums, four);
  return with_minimums<F>(sum_lanes(lanes), four_sums, one);
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

// Rows n0 .. n1 of a K-quant matrix in groups (kiln/core/quantized_k.h), against all M activation rows: eight
// rows a pass (kquant_row_group.h), or on the scalar path each row gathered back in order.
template <QuantFormat F>
void row_groups(QuantDot dot, const QuantizedMatrix& w, int64_t n0, int64_t n1, const Q8K& a, int64_t M, float* out) {
  constexpr int64_t bytes = k_block_bytes(F);
  const int64_t blocks = a.blocks;
  const uint8_t* data = w.data.data<uint8_t>();
  thread_local std::vector<uint8_t> row;  // (the scalar path's; it keeps its memory)
  for (int64_t n = n0; n < n1; n += kRowGroup) {
    const uint8_t* group = data + n * blocks * bytes;
    for (int64_t m = 0; m < M; ++m) {
      if (dot != QuantDot::scalar) {
        k_group_dot(F, dot == QuantDot::avx512_vnni, group, blocks, a.scales.data() + m * blocks,
                    a.levels.data() + m * blocks * S, a.sums.data() + m * blocks * (S / 16), out + m * w.rows + n);
        continue;
      }
      row.resize(size_t(blocks * bytes));
      for (int64_t r = 0; r < kRowGroup; ++r) {
        for (int64_t b = 0; b < blocks; ++b)
          take_from_k_group(F, group + b * k_group_bytes(F), r, row.data() + b * bytes);
        out[m * w.rows + n + r] = dot_scalar<F>(row.data(), a, m);
      }
    }
  }
}

// Rows n0 .. split in groups, then split .. n1 in order.
template <QuantFormat F>
void grouped_then_in_order(QuantDot dot, const QuantizedMatrix& w, int64_t n0, int64_t split, int64_t n1,
                           const Q8K& a, int64_t M, float* out) {
  if (n0 < split) row_groups<F>(dot, w, n0, split, a, M, out);
  rows<F>(dot, w, split, n1, a, M, out);
}

}  // namespace

void kquant_matmul_rows(const float* x, int64_t M, const QuantizedMatrix& w, float* out, QuantDot dot) {
  KILN_CHECK(w.k_quant() && w.cols % S == 0, "kquant_matmul: ", quant_format_name(w.format), " weights of ", w.cols,
             " columns are not K-quant blocks");
  thread_local Q8K kept;
  Q8K& a = kept;  // (named in the loop below, kept would be each worker thread's own)
  quantize_q8k(x, M, w.cols, a);
  const int64_t grouped = w.grouped_row_end();  // (rows in groups: kiln/core/quantized_k.h)
  for_row_chunks(
      w.rows, M * w.rows * w.cols,
      [&](int64_t n0, int64_t n1) {
        const int64_t split = std::clamp(grouped, n0, n1);
        with_k_quant(w.format, [&]<QuantFormat F>() { grouped_then_in_order<F>(dot, w, n0, split, n1, a, M, out); });
      },
      grouped > 0 ? kRowGroup : 1);
}

namespace {
template <QuantFormat F>
void row_levels(const QuantizedMatrix& w, int64_t n, int8_t* levels, float* scales, float* mins) {
  constexpr int64_t per_block = S / sub_block_values(F);
  uint8_t scratch[kMaxKBlockBytes];  // (a grouped row's block, gathered)
  for (int64_t b = 0; b < w.cols / S; ++b) {
    const uint8_t* x = k_block_of_row(w, n, b, scratch);
    const KBlock k = decode_block<F>(x);
#ifdef KILN_X86_INTRINSICS
    // The decoding kernel's unpacking, two chunks a step (signed_level's values: IQ4_XS's looked up, the others'
    // less their zero level).
    auto chunks = [&]<int i>() {
      __m256i first, second;
      chunk_pair<F, i>(x, first, second);
      if constexpr (F != QuantFormat::iq4_xs) {
        first = _mm256_sub_epi8(first, _mm256_set1_epi8(char(zero_level(F))));
        second = _mm256_sub_epi8(second, _mm256_set1_epi8(char(zero_level(F))));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(levels + b * S + 64 * i), first);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(levels + b * S + 64 * i + 32), second);
    };
    chunks.template operator()<0>();
    chunks.template operator()<1>();
    chunks.template operator()<2>();
    chunks.template operator()<3>();
#else
    for (int c = 0; c < 8; ++c) {
      uint8_t u[32];
      chunk_levels<F>(x, c, u);
      for (int j = 0; j < 32; ++j) levels[b * S + c * 32 + j] = int8_t(signed_level<F>(u[j], zero_level(F)));
    }
#endif
    for (int64_t i = 0; i < per_block; ++i) {
      scales[b * per_block + i] = k.d * float(sub_scale<F>(k, int(i)));
      if constexpr (has_minimums(F)) mins[b * per_block + i] = -k.dmin * float(k.mins[i]);
    }
  }
}
}  // namespace

void kquant_row_levels(const QuantizedMatrix& w, int64_t n, int8_t* levels, float* scales, float* mins) {
  with_k_quant(w.format, [&]<QuantFormat F>() { row_levels<F>(w, n, levels, scales, mins); });
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
