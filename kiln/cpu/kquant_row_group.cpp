// The K-quants' eight-row decoding kernels. Per block of 256 and group,
// against the row kernel (kquant_matmul.cpp), whose integer lane l of a row
// holds bytes 4l .. 4l + 3 of every chunk of 32 times the chunk's scale:
// here lanes[l] holds that lane of the eight rows, one row a 32-bit lane, so
// a 32-byte load of levels is lane l of a chunk's bytes for all eight rows,
// the activations' four bytes are one broadcast for all eight, and the
// sub-block scales (and minimums) come from their byte planes eight rows at
// a time.
#include "kiln/cpu/kquant_row_group.h"

#include <cstring>

#include "kiln/core/error.h"
#include "kiln/core/quantized_k.h"
#include "kiln/cpu/kquant_lanes.h"
#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {

#ifdef KILN_X86_INTRINSICS
namespace {

[[gnu::always_inline]] inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
[[gnu::always_inline]] inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
[[gnu::always_inline]] inline __m256i broadcast8(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm256_set1_epi64x(v);
}

// Eight f16 values (the rows' d or dmin) widened.
[[gnu::always_inline]] inline __m256 halves8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The row kernel's sum_lanes (quantized_matmul.h), a row to a lane.
[[gnu::always_inline]] inline __m256 sum_lanes(const __m256* acc) {
  const __m256 s0 = _mm256_add_ps(acc[0], acc[4]), s1 = _mm256_add_ps(acc[1], acc[5]);
  const __m256 s2 = _mm256_add_ps(acc[2], acc[6]), s3 = _mm256_add_ps(acc[3], acc[7]);
  return _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3));
}

// A block's sub-block scales and minimums for the eight rows, a byte each:
// scales[8c + r], minimums[8c + r] for sub-block c and row r (k4_scale_words
// on the byte planes: plane j holds byte j of each row's 12).
struct GroupScales {
  alignas(32) uint8_t scales[64];
  alignas(32) uint8_t minimums[64];
};
[[gnu::always_inline]] inline void group_scales(const uint8_t* x, GroupScales& s) {
  const __m256i w0 = load32(x + 32), w1 = load32(x + 64), w2 = load32(x + 96);  // planes 0-3, 4-7, 8-11
  const __m256i low6 = _mm256_set1_epi8(0x3f), low4 = _mm256_set1_epi8(0x0f), top2 = _mm256_set1_epi8(0x30);
  // (a byte's top two bits to bits 4-5: a 16-bit shift by 2, the other byte's bits masked off)
  const __m256i scales47 =
      _mm256_or_si256(_mm256_and_si256(w2, low4), _mm256_and_si256(_mm256_srli_epi16(w0, 2), top2));
  const __m256i mins47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w2, 4), low4),
                                         _mm256_and_si256(_mm256_srli_epi16(w1, 2), top2));
  _mm256_store_si256(reinterpret_cast<__m256i*>(s.scales), _mm256_and_si256(w0, low6));
  _mm256_store_si256(reinterpret_cast<__m256i*>(s.scales + 32), scales47);
  _mm256_store_si256(reinterpret_cast<__m256i*>(s.minimums), _mm256_and_si256(w1, low6));
  _mm256_store_si256(reinterpret_cast<__m256i*>(s.minimums + 32), mins47);
}

// Sub-block c's scale of each row as a 16-bit pair (s | s << 16) in the row's lane, for vpmaddwd.
[[gnu::always_inline]] inline __m256i scale_pairs(const GroupScales& s, int c) {
  const __m256i pick = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,  //
                                        4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
  return _mm256_shuffle_epi8(broadcast8(s.scales + 8 * c), pick);
}
// Minimums 2j and 2j + 1 of each row as 16-bit values in the row's lane.
[[gnu::always_inline]] inline __m256i minimum_pairs(const GroupScales& s, int j) {
  const __m256i pick = _mm256_setr_epi8(0, -1, 8, -1, 1, -1, 9, -1, 2, -1, 10, -1, 3, -1, 11, -1,  //
                                        4, -1, 12, -1, 5, -1, 13, -1, 6, -1, 14, -1, 7, -1, 15, -1);
  const __m128i planes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.minimums + 16 * j));
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(planes), pick);
}

// Q4_K and Q5_K: d at 0, dmin at 16, the 12 scale bytes' planes at 32 (quantized_k.h's kKGroupLayout);
// Q4_K's levels' units at 128, Q5_K's qh units at 128 and levels' units at 384. Chunks 2t and 2t + 1 are the
// low and high nibbles of the levels' bytes 32t .. 32t + 31 (Q5_K: over bits 2t and 2t + 1 of qh's bytes as
// 16); the minimums' term is the row kernel's four lanes (Q4_K) or their integer sum (Q5_K).
template <typename Lanes, QuantFormat F>
inline void q45k_group_dot(const uint8_t* group, int64_t blocks, const float* act_scales, const int8_t* act_levels,
                           const int16_t* act_sums, float* out) {
  constexpr int64_t S = kSuperBlock, bytes = k_group_bytes(F), qs = F == QuantFormat::q5_k ? 384 : 128;
  __m256 acc[8], four[4];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (__m256& f : four) f = _mm256_setzero_ps();
  const __m256i nibble = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
  GroupScales s;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* x = group + b * bytes;
    for (int64_t line = 0; line < bytes; line += 64) prefetch_ahead(x + line);
    const int8_t* q8 = act_levels + b * S;
    group_scales(x, s);
    __m256i lanes[8];
    for (__m256i& l : lanes) l = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {  // chunks 2t and 2t + 1: the low and high nibbles of the same bytes
      const __m256i even_scales = scale_pairs(s, 2 * t), odd_scales = scale_pairs(s, 2 * t + 1);
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        const __m256i bits = load32(x + qs + (8 * t + l) * 32);
        __m256i even = _mm256_and_si256(bits, nibble);
        __m256i odd = _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibble);
        if constexpr (F == QuantFormat::q5_k) {  // (a 16-bit shift: the bit 4 it leaves is the byte's own)
          const __m256i high = load32(x + 128 + l * 32);
          const int c = 2 * t;  // bits c and c + 1 to bit 4
          const __m256i even_high = c <= 4 ? _mm256_slli_epi16(high, 4 - c) : _mm256_srli_epi16(high, c - 4);
          const __m256i odd_high = c + 1 <= 4 ? _mm256_slli_epi16(high, 3 - c) : _mm256_srli_epi16(high, c - 3);
          even = _mm256_or_si256(even, _mm256_and_si256(even_high, bit4));
          odd = _mm256_or_si256(odd, _mm256_and_si256(odd_high, bit4));
        }
        const __m256i even_pairs = _mm256_maddubs_epi16(even, broadcast4(q8 + 64 * t + 4 * l));
        const __m256i odd_pairs = _mm256_maddubs_epi16(odd, broadcast4(q8 + 64 * t + 32 + 4 * l));
        lanes[l] = Lanes::add_scaled(Lanes::add_scaled(lanes[l], even_pairs, even_scales), odd_pairs, odd_scales);
      }
    }
    // The minimums' four lanes: minimums 2j, 2j + 1 times the activations' sums of their 32 (pairs of sums of 16).
    alignas(16) int32_t sum_pairs[4];
    const int16_t* sums = act_sums + b * (S / 16);
    _mm_store_si128(reinterpret_cast<__m128i*>(sum_pairs),
                    _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sums)),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(sums + 8))));
    const float scale = act_scales[b];
    const __m256 d = _mm256_mul_ps(_mm256_set1_ps(scale), halves8(x));
    const __m256 dmin = _mm256_mul_ps(_mm256_set1_ps(-scale), halves8(x + 16));
    for (int l = 0; l < 8; ++l) acc[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes[l]), acc[l]);
    __m256i minimum_lanes[4];
    for (int j = 0; j < 4; ++j)
      minimum_lanes[j] = _mm256_madd_epi16(minimum_pairs(s, j), _mm256_set1_epi32(sum_pairs[j]));
    if constexpr (F == QuantFormat::q4_k) {
      for (int j = 0; j < 4; ++j) four[j] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(minimum_lanes[j]), four[j]);
    } else {  // (in four[0]: the row kernel's one f32)
      const __m256i total = _mm256_add_epi32(_mm256_add_epi32(minimum_lanes[0], minimum_lanes[1]),
                                             _mm256_add_epi32(minimum_lanes[2], minimum_lanes[3]));
      four[0] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(total), four[0]);
    }
  }
  // The row kernel's with_minimums, a row to a lane.
  const __m256 minimums = F == QuantFormat::q5_k
                              ? four[0]
                              : _mm256_add_ps(_mm256_add_ps(four[0], four[2]), _mm256_add_ps(four[1], four[3]));
  _mm256_storeu_ps(out, _mm256_add_ps(sum_lanes(acc), minimums));
}

// Q2_K, Q3_K and Q6_K: sixteen scales of 16 values (chunk c's lanes 0-3 take scale 2c, lanes 4-7 scale 2c + 1).
// The pieces (quantized_k.h's kKGroupLayout): Q2_K's d, dmin, scale planes and levels; Q3_K's and Q6_K's d,
// scale planes, levels (Q6_K's ql) and their high bits (hmask, qh).
template <QuantFormat F>
constexpr int64_t k16_piece(int piece) {  // 0 d, 1 scale planes, 2 levels, 3 their high bits (Q2_K has none)
  return k_group_piece_at<F>(size_t(F == QuantFormat::q2_k && piece > 0 ? piece + 1 : piece));
}

// A block's sixteen scales as signed byte planes (plane i at 8i: scale i of each row): Q6_K's as stored, Q2_K's
// the low nibbles of its planes (the high ones are its minimums), Q3_K's from its 12 planes as k3_scales takes
// them, into `kept`.
template <QuantFormat F>
[[gnu::always_inline]] inline const int8_t* scale_planes(const uint8_t* x, int8_t* kept) {
  const uint8_t* planes = x + k16_piece<F>(1);
  if constexpr (F == QuantFormat::q6_k) return reinterpret_cast<const int8_t*>(planes);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const auto store = [&](int i, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(kept + 32 * i), v); };
  if constexpr (F == QuantFormat::q2_k) {
    for (int i = 0; i < 4; ++i) store(i, _mm256_and_si256(load32(planes + 32 * i), low4));
  } else {  // planes 0-3 and 4-7: low nibbles scales 0-7, high ones 8-15; bits 2j of planes 8-11 their top bits
    const __m256i w0 = load32(planes), w1 = load32(planes + 32), w2 = load32(planes + 64);
    const __m256i low2 = _mm256_set1_epi8(0x03), zero = _mm256_set1_epi8(32);
    const auto scales = [&](__m256i nibbles, int top) {  // (16-bit shifts: the other byte's bits masked off)
      const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(w2, top), low2), 4);
      return _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(nibbles, low4), high), zero);
    };
    store(0, scales(w0, 0));
    store(1, scales(w1, 2));
    store(2, scales(_mm256_srli_epi16(w0, 4), 4));
    store(3, scales(_mm256_srli_epi16(w1, 4), 6));
  }
  return kept;
}

// Each row's values 2l and 2l + 1 (as pairs) times the activations' sums of 16 2l and 2l + 1: the row kernel's
// lane l of times_act_sums.
[[gnu::always_inline]] inline __m256i times_sums(__m256i first, __m256i second, const int16_t* sums, int l) {
  return _mm256_add_epi32(_mm256_madd_epi16(first, _mm256_set1_epi32(uint16_t(sums[2 * l]))),
                          _mm256_madd_epi16(second, _mm256_set1_epi32(uint16_t(sums[2 * l + 1]))));
}

// Lane l of chunks 4h .. 4h + 3 for the eight rows, unsigned (before Q3_K's and Q6_K's zero levels). Q2_K and
// Q3_K: 2 bits at 2k of the levels' bytes 32h + 4l .. (Q3_K: over hmask's bit 4h + k as 4). Q6_K: the low
// nibbles of ql's bytes 64h + 4l .. and 64h + 32 + 4l .. (k = 0, 1) or their high ones (k = 2, 3), over bits
// 2k of qh's bytes 32h + 4l .. as bits 4-5.
template <QuantFormat F>
[[gnu::always_inline]] inline void lane_levels(const uint8_t* x, int l, int h, __m256i* levels) {
  const uint8_t *low = x + k16_piece<F>(2), *high = x + k16_piece<F>(3);
  if constexpr (F == QuantFormat::q6_k) {
    const __m256i nibble = _mm256_set1_epi8(0x0f), top_bits = _mm256_set1_epi8(0x30);
    const __m256i low0 = load32(low + (16 * h + l) * 32), low1 = load32(low + (16 * h + 8 + l) * 32);
    const __m256i top = load32(high + (8 * h + l) * 32);
    levels[0] = _mm256_or_si256(_mm256_and_si256(low0, nibble), _mm256_and_si256(_mm256_slli_epi16(top, 4), top_bits));
    levels[1] = _mm256_or_si256(_mm256_and_si256(low1, nibble), _mm256_and_si256(_mm256_slli_epi16(top, 2), top_bits));
    levels[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low0, 4), nibble), _mm256_and_si256(top, top_bits));
    levels[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low1, 4), nibble),
                                _mm256_and_si256(_mm256_srli_epi16(top, 2), top_bits));
  } else {
    const __m256i bits = load32(low + (8 * h + l) * 32), two = _mm256_set1_epi8(0x03);
    for (int k = 0; k < 4; ++k) levels[k] = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), two);
    if constexpr (F == QuantFormat::q3_k) {
      const __m256i hmask = load32(high + l * 32), four = _mm256_set1_epi8(0x04);
      for (int k = 0; k < 4; ++k) {
        const int c = 4 * h + k;
        const __m256i moved = c < 2 ? _mm256_slli_epi16(hmask, 2 - c) : _mm256_srli_epi16(hmask, c - 2);
        levels[k] = _mm256_or_si256(levels[k], _mm256_and_si256(moved, four));
      }
    }
  }
}

// A lane at a time over the block (one accumulator live: AVX2 has 16 registers). Zero levels as the row kernel
// takes them: Q3_K's 4 off each byte product, Q6_K's 32 off each lane through the activations' sums of 16 (less
// 32 (sum 2l * scale 2l + sum 2l + 1 * scale 2l + 1)); Q2_K's minimums (2l and 2l + 1 against the same sums)
// into the accumulator before the levels.
template <typename Lanes, QuantFormat F>
inline void k16_group_dot(const uint8_t* group, int64_t blocks, const float* act_scales, const int8_t* act_levels,
                          const int16_t* act_sums, float* out) {
  constexpr int64_t S = kSuperBlock, bytes = k_group_bytes(F);
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  alignas(32) int8_t kept[128];
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* x = group + b * bytes;
    for (int64_t line = 0; line < bytes; line += 64) prefetch_ahead(x + line);
    const int8_t* q8 = act_levels + b * S;
    const int16_t* sums = act_sums + b * (S / 16);
    const int8_t* planes = scale_planes<F>(x, kept);
    __m256i pairs[16];  // scale i of each row as a 16-bit pair in its lane
    for (int i = 0; i < 16; ++i)
      pairs[i] = word_pairs(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(planes + 8 * i))));
    const float scale = act_scales[b];
    const __m256 d = _mm256_mul_ps(_mm256_set1_ps(scale), halves8(x));
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      // (two chains: one of eight vpdpwssd waited on each other's latency)
      __m256i lane[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      if constexpr (F == QuantFormat::q6_k)
        lane[0] = _mm256_sub_epi32(lane[0], _mm256_slli_epi32(times_sums(pairs[2 * l], pairs[2 * l + 1], sums, l), 5));
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256i levels[4];
        lane_levels<F>(x, l, h, levels);
        for (int k = 0; k < 4; ++k) {
          const int c = 4 * h + k;
          const __m256i act = broadcast4(q8 + 32 * c + 4 * l);
          __m256i products = _mm256_maddubs_epi16(levels[k], act);
          if constexpr (F == QuantFormat::q3_k)
            products = _mm256_sub_epi16(products, _mm256_maddubs_epi16(_mm256_set1_epi8(4), act));
          lane[k % 2] = Lanes::add_scaled(lane[k % 2], products, pairs[2 * c + l / 4]);
        }
      }
      if constexpr (F == QuantFormat::q2_k) {  // minimums 2l, 2l + 1: the high nibbles of planes 2l, 2l + 1
        const auto minimums = [&](int i) {
          const __m128i plane = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + k16_piece<F>(1) + 8 * i));
          return word_pairs(_mm256_srli_epi32(_mm256_cvtepu8_epi32(plane), 4));
        };
        const __m256 dmin = _mm256_mul_ps(_mm256_set1_ps(-scale), halves8(x + k_group_piece_at<F>(1)));
        acc[l] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(times_sums(minimums(2 * l), minimums(2 * l + 1), sums, l)),
                                 acc[l]);
      }
      acc[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_add_epi32(lane[0], lane[1])), acc[l]);
    }
  }
  _mm256_storeu_ps(out, sum_lanes(acc));
}

// IQ4_XS: d at 0, scales_h's two byte planes at 16, scales_l's four at 32, the levels' units at 64 (quantized_k.h's
// kKGroupLayout). Chunk c's 16 bytes are units 4c .. 4c + 3: unit 4c + m's low nibbles are lane m of the chunk
// (values 4m .. 4m + 3), its high ones lane m + 4 (values 16 + 4m ..), each looked up in kIq4nlValues and
// multiplied as the row kernel multiplies them (|level| against the activations with the level's sign).
template <typename Lanes>
inline void iq4xs_group_dot(const uint8_t* group, int64_t blocks, const float* act_scales, const int8_t* act_levels,
                            float* out) {
  constexpr int64_t S = kSuperBlock, bytes = k_group_bytes(QuantFormat::iq4_xs);
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  const __m256i values =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  const __m128i low4 = _mm_set1_epi8(0x0f), low2 = _mm_set1_epi8(0x03);
  const auto plane = [](const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); };
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* x = group + b * bytes;
    for (int64_t line = 0; line < bytes; line += 64) prefetch_ahead(x + line);
    const int8_t* q8 = act_levels + b * S;
    __m256i lanes[8];
    for (__m256i& l : lanes) l = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      // Sub-block c's signed scale of each row (iq4_xs_scales, eight rows a step), as a 16-bit pair in its lane.
      const __m128i low = _mm_and_si128(_mm_srli_epi16(plane(x + 32 + 8 * (c / 2)), 4 * (c % 2)), low4);
      const __m128i high = _mm_and_si128(_mm_srli_epi16(plane(x + 16 + 8 * (c / 4)), 2 * (c % 4)), low2);
      const __m128i scale8 = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
      const __m256i scales = word_pairs(_mm256_cvtepi8_epi32(scale8));
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) {
        const __m256i bits = load32(x + 64 + (4 * c + m) * 32);
        const __m256i levels[2] = {_mm256_shuffle_epi8(values, _mm256_and_si256(bits, nibble)),
                                   _mm256_shuffle_epi8(values, _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibble))};
        for (int h = 0; h < 2; ++h) {
          const int l = m + 4 * h;
          const __m256i act = broadcast4(q8 + 32 * c + 4 * l);
          const __m256i pairs =
              _mm256_maddubs_epi16(_mm256_sign_epi8(levels[h], levels[h]), _mm256_sign_epi8(act, levels[h]));
          lanes[l] = Lanes::add_scaled(lanes[l], pairs, scales);
        }
      }
    }
    const __m256 d = _mm256_mul_ps(_mm256_set1_ps(act_scales[b]), halves8(x));
    for (int l = 0; l < 8; ++l) acc[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes[l]), acc[l]);
  }
  _mm256_storeu_ps(out, sum_lanes(acc));
}

template <typename Lanes>
inline void group_dot(QuantFormat format, const uint8_t* group, int64_t blocks, const float* act_scales,
                      const int8_t* act_levels, const int16_t* act_sums, float* out) {
  with_k_quant(format, [&]<QuantFormat F>() {
    if constexpr (F == QuantFormat::q4_k || F == QuantFormat::q5_k)
      q45k_group_dot<Lanes, F>(group, blocks, act_scales, act_levels, act_sums, out);
    else if constexpr (F == QuantFormat::iq4_xs)
      iq4xs_group_dot<Lanes>(group, blocks, act_scales, act_levels, out);
    else
      k16_group_dot<Lanes, F>(group, blocks, act_scales, act_levels, act_sums, out);
  });
}

[[gnu::flatten]] void group_dot_avx2(QuantFormat format, const uint8_t* group, int64_t blocks,
                                     const float* act_scales, const int8_t* act_levels, const int16_t* act_sums,
                                     float* out) {
  group_dot<Avx2Lanes>(format, group, blocks, act_scales, act_levels, act_sums, out);
}
[[gnu::flatten, gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] void group_dot_vnni(
    QuantFormat format, const uint8_t* group, int64_t blocks, const float* act_scales, const int8_t* act_levels,
    const int16_t* act_sums, float* out) {
  group_dot<Avx512Lanes>(format, group, blocks, act_scales, act_levels, act_sums, out);
}

}  // namespace
#endif

void k_group_dot(QuantFormat format, bool vnni, const uint8_t* group, int64_t blocks, const float* act_scales,
                 const int8_t* act_levels, const int16_t* act_sums, float* out) {
#ifdef KILN_X86_INTRINSICS
  if (vnni) return group_dot_vnni(format, group, blocks, act_scales, act_levels, act_sums, out);
  return group_dot_avx2(format, group, blocks, act_scales, act_levels, act_sums, out);
#else
  KILN_FAIL("k_group_dot: no x86 intrinsics in this build (the scalar path gathers the rows instead)");
#endif
}

}  // namespace kiln::cpu
