// Q4_K's, Q5_K's, Q6_K's and IQ4_XS's eight-row decoding kernels. Per block of 256 and group,
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

// Q4_K and Q5_K: d at 0, dmin at 16, the 12 scale bytes' planes at 32 (quantized_k.h's kQ4kGroup, kQ5kGroup);
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

// Q6_K: d at 0, the 16 signed scales' planes at 16, ql's units at 144, qh's at 1,168 (quantized_k.h's kQ6kGroup).
// Chunk 4h + k's levels: the low nibbles of ql's bytes 64h .. 64h + 63 (k = 0, 1) or their high ones (k = 2, 3),
// over bits 2k of qh's bytes 32h .. 32h + 31 as bits 4-5; the zero (32) comes off each lane through the
// activations' sums of 16, as the row kernel takes it.
template <typename Lanes>
inline void q6k_group_dot(const uint8_t* group, int64_t blocks, const float* act_scales, const int8_t* act_levels,
                          const int16_t* act_sums, float* out) {
  constexpr int64_t S = kSuperBlock, ql = 144, qh = 144 + 1024;
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  const __m256i nibble = _mm256_set1_epi8(0x0f), high = _mm256_set1_epi8(0x30);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* x = group + b * k_group_bytes(QuantFormat::q6_k);
    for (int64_t line = 0; line < k_group_bytes(QuantFormat::q6_k); line += 64) prefetch_ahead(x + line);
    const int8_t* q8 = act_levels + b * S;
    __m256i pairs[16];  // scale i of each row as a 16-bit pair in its lane
    for (int i = 0; i < 16; ++i) {
      const __m256i scale = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + 16 + 8 * i)));
      pairs[i] = _mm256_blend_epi16(scale, _mm256_slli_epi32(scale, 16), 0xaa);
    }
    const int16_t* sums = act_sums + b * (S / 16);
    const __m256 d = _mm256_mul_ps(_mm256_set1_ps(act_scales[b]), halves8(x));
    // A lane at a time over the block (one accumulator live: AVX2 has 16 registers).
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      // Less 32 (sum 2l * scale 2l + sum 2l + 1 * scale 2l + 1), as the row kernel takes the zero off lane l.
      const __m256i sum0 = _mm256_set1_epi32(uint16_t(sums[2 * l]));
      const __m256i sum1 = _mm256_set1_epi32(uint16_t(sums[2 * l + 1]));
      const __m256i zero =
          _mm256_add_epi32(_mm256_madd_epi16(pairs[2 * l], sum0), _mm256_madd_epi16(pairs[2 * l + 1], sum1));
      // (two chains: one of eight vpdpwssd waited on each other's latency)
      __m256i lane[2] = {_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(zero, 5)), _mm256_setzero_si256()};
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i low0 = load32(x + ql + (16 * h + l) * 32), low1 = load32(x + ql + (16 * h + 8 + l) * 32);
        const __m256i top = load32(x + qh + (8 * h + l) * 32);
        const __m256i levels[4] = {
            _mm256_or_si256(_mm256_and_si256(low0, nibble), _mm256_and_si256(_mm256_slli_epi16(top, 4), high)),
            _mm256_or_si256(_mm256_and_si256(low1, nibble), _mm256_and_si256(_mm256_slli_epi16(top, 2), high)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low0, 4), nibble), _mm256_and_si256(top, high)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low1, 4), nibble),
                            _mm256_and_si256(_mm256_srli_epi16(top, 2), high))};
        for (int k = 0; k < 4; ++k) {
          const int c = 4 * h + k;
          const __m256i products = _mm256_maddubs_epi16(levels[k], broadcast4(q8 + 32 * c + 4 * l));
          lane[k % 2] = Lanes::add_scaled(lane[k % 2], products, pairs[2 * c + l / 4]);
        }
      }
      acc[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_add_epi32(lane[0], lane[1])), acc[l]);
    }
  }
  _mm256_storeu_ps(out, sum_lanes(acc));
}

// IQ4_XS: d at 0, scales_h's two byte planes at 16, scales_l's four at 32, the levels' units at 64 (quantized_k.h's
// kIq4xsGroup). Chunk c's 16 bytes are units 4c .. 4c + 3: unit 4c + m's low nibbles are lane m of the chunk
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
      const __m256i scale = _mm256_cvtepi8_epi32(scale8);
      const __m256i scales = _mm256_blend_epi16(scale, _mm256_slli_epi32(scale, 16), 0xaa);
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
  if (format == QuantFormat::q4_k)
    return q45k_group_dot<Lanes, QuantFormat::q4_k>(group, blocks, act_scales, act_levels, act_sums, out);
  if (format == QuantFormat::q5_k)
    return q45k_group_dot<Lanes, QuantFormat::q5_k>(group, blocks, act_scales, act_levels, act_sums, out);
  if (format == QuantFormat::iq4_xs) return iq4xs_group_dot<Lanes>(group, blocks, act_scales, act_levels, out);
  q6k_group_dot<Lanes>(group, blocks, act_scales, act_levels, act_sums, out);
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
  KILN_CHECK(can_group_rows(format) && format >= QuantFormat::q2_k, "k_group_dot: ", quant_format_name(format),
             " is not a K-quant whose rows go in groups");
#ifdef KILN_X86_INTRINSICS
  if (vnni) return group_dot_vnni(format, group, blocks, act_scales, act_levels, act_sums, out);
  return group_dot_avx2(format, group, blocks, act_scales, act_levels, act_sums, out);
#else
  KILN_FAIL("k_group_dot: no x86 intrinsics in this build (the scalar path gathers the rows instead)");
#endif
}

}  // namespace kiln::cpu
