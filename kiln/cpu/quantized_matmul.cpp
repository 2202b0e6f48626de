// Quantized products for decoding, as llama.cpp computes them: the
// activations are quantized to int8 per block of 32 (scale max|x| / 127),
// each block's dot product with a weight row runs in integers, and the f32
// sum of the blocks is scaled once. A decoding step is one row per sequence,
// so the product reads every weight once: int8 halves and int4 quarters what
// bf16 reads (docs/PERFORMANCE.md measures how near memory's speed it gets).
//
// The block dot: 32 byte products summed four at a time into eight int32
// lanes. AVX2's vpmaddubsw (u8 x s8 -> pairs in s16) then vpmaddwd with ones
// gives exactly the lanes AVX-512 VNNI's vpdpbusd gives in one instruction,
// so the f32 work that follows (one fused multiply-add per lane and block,
// then a fixed tree over the lanes) makes every path, the scalar one
// included, give the same bits. vpmaddubsw takes an unsigned operand: the
// 4- and 5-bit levels are unsigned (zero points and minimums come afterwards);
// int8 weights (and IQ4_NL's looked-up levels) go in as |w| with the signs
// moved onto the activations (vpsignb). Neither saturates: levels stop at
// +-127, so a pair of products is at most 2 * 127 * 127 < 2^15.
#include "kiln/cpu/quantized_matmul.h"

// VnniOps' 512-bit values pass between functions only inside the flattened, AVX-512-targeted rows_vnni, never
// through a call: GCC's warning that such a return would change the ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/backend/batch_invariant.h"
#include "kiln/core/half.h"
#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/few_rows_product.h"
#include "kiln/cpu/kquant_matmul.h"
#include "kiln/cpu/low_precision.h"
#include "kiln/cpu/packed_gemm.h"
#include "kiln/cpu/quantized_activations.h"
#include "kiln/cpu/quantized_gemm.h"
#include "kiln/cpu/row_group_product.h"
#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {
namespace {

constexpr int64_t B = kQuantBlock;
constexpr int32_t kQ40Zero = 8;   // Q4_0's (int4's) levels u stand for u - 8
constexpr int32_t kQ50Zero = 16;  // Q5_0's for u - 16

}  // namespace

// A whole block with AVX2, the same bits: the largest magnitude does not
// depend on the order, and vcvtps2dq rounds to nearest even as nearbyint does.
#ifdef KILN_X86_INTRINSICS
inline int32_t quantize_whole_block(const float* x, int8_t* q, float& scale) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[4], amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(_mm256_and_ps(v[i], magnitude), amax);
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float exact = _mm_cvtss_f32(m) / 127.0f;
  const float inverse = exact > 0 ? 127.0f / _mm_cvtss_f32(m) : 0.0f;
  scale = round_to_half(exact);
  __m256i levels[4], sums = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    levels[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(inverse)));
    sums = _mm256_add_epi32(sums, levels[i]);
  }
  // packs interleave the 128-bit halves: bytes come out as dwords 0, 2, 4, 6, 1, 3, 5, 7.
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(levels[0], levels[1]), _mm256_packs_epi32(levels[2], levels[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
#endif

// The scale is kept in f16, as llama.cpp's Q8_0 activations keep it (levels
// from the exact scale, products with the rounded one): a GGUF file's
// greedy tokens are llama.cpp's.
int32_t quantize_activation_block(const float* x, int64_t count, int8_t* q, float& scale) {
#ifdef KILN_X86_INTRINSICS
  if (count == B) return quantize_whole_block(x, q, scale);
#endif
  float v[B];
  for (int64_t j = 0; j < B; ++j) v[j] = j < count ? x[j] : 0.0f;
  float amax = 0;
  for (float f : v) amax = std::max(amax, std::abs(f));
  const float exact = amax / 127.0f;
  const float inverse = exact > 0 ? 127.0f / amax : 0.0f;
  scale = round_to_half(exact);
  int32_t sum = 0;
  for (int64_t j = 0; j < B; ++j) sum += q[j] = int8_t(std::nearbyint(v[j] * inverse));
  return sum;
}

namespace {

// Into `a`, whose arrays keep their memory from call to call (a decoding
// step allocates nothing here once the first has run).
void quantize_activations(const float* x, int64_t M, int64_t K, int64_t blocks, bool paired, int32_t zero,
                          QuantizedActivations& a) {
  const int64_t stored = paired ? (blocks + 1) / 2 * 2 : blocks;
  a.blocks = blocks;
  a.stored_blocks = stored;
  a.levels.assign(size_t(M * stored * B), 0);
  a.scales.assign(size_t(M * blocks), 0);
  a.sums.assign(size_t(M * blocks), 0);
  const int64_t lanes_a_block = paired ? 4 : zero != 0 ? 8 : 0;
  a.zero_lanes.assign(size_t(M * stored * lanes_a_block), 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < blocks; ++b) {
      const size_t at = size_t(m * blocks + b);
      int8_t q[B];
      a.sums[at] = quantize_activation_block(x + m * K + b * B, std::min(B, K - b * B), q, a.scales[at]);
      int8_t* stored_levels = a.levels.data() + (m * stored + b) * B;
      if (!paired) {
        std::copy(q, q + B, stored_levels);
        for (int64_t l = 0; l < 8 && zero != 0; ++l)
          a.zero_lanes[size_t((m * blocks + b) * 8 + l)] =
              -zero * (q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]);
        continue;
      }
      int8_t* pair = stored_levels - (b % 2) * B;
      for (int64_t j = 0; j < B; ++j) pair[paired_index(b, j)] = q[j];
      // Integer lane l of the block takes levels 4l .. 4l + 3 and 16 + 4l .. 16 + 4l + 3.
      for (int64_t l = 0; l < 4 && zero != 0; ++l) {
        int32_t lane = 0;
        for (int64_t t = 0; t < 4; ++t) lane += q[4 * l + t] + q[B / 2 + 4 * l + t];
        a.zero_lanes[size_t((m * stored + b) * 4 + l)] = -zero * lane;
      }
    }
}

// How a block's weight bytes enter the integer products: int8 levels
// (scaled once per row, or per block: int8b), in as |w| with their signs
// moved onto the activations; or unsigned levels of 4 or 5 bits, straight
// into vpmaddubsw, two blocks at a time (dot_rows_paired). Q4_0's zero point
// (8) and Q5_0's (16) come off in integers; int4z's, which each block sets,
// as an f32 correction per block, scale * zero * sum(x levels); Q4_1 and
// Q5_1 add a minimum per block the same way: min * x scale * sum(x levels).
// IQ4_NL's levels are looked up (kIq4nlValues, within +-127) and go in as int8's do, a block at a time.
enum class Levels {
  int8, int8_block, int4_lookup, int4_fixed_zero, int4_block_zero, int4_block_min, int5_fixed_zero, int5_block_min
};
constexpr Levels levels_of(QuantFormat f) {
  switch (f) {
    case QuantFormat::int8: return Levels::int8;
    case QuantFormat::int8_block: return Levels::int8_block;
    case QuantFormat::iq4_nl: return Levels::int4_lookup;
    case QuantFormat::int4: return Levels::int4_fixed_zero;
    case QuantFormat::int4_zero: return Levels::int4_block_zero;
    case QuantFormat::q4_1: return Levels::int4_block_min;
    case QuantFormat::q5_0: return Levels::int5_fixed_zero;
    case QuantFormat::q5_1: return Levels::int5_block_min;
    default: return Levels::int8;  // the K-quants have kernels of their own (kquant_matmul.cpp)
  }
}
// Levels stored a byte each (int8, int8b), two to a byte (int4, int4z, q4_1,
// iq4_nl), or two to a byte with a word of fifth bits (q5_0, q5_1).
constexpr bool byte_levels(Levels L) { return L == Levels::int8 || L == Levels::int8_block; }
constexpr bool five_bits(Levels L) { return L == Levels::int5_fixed_zero || L == Levels::int5_block_min; }
constexpr int64_t block_bytes(Levels L) { return byte_levels(L) ? B : five_bits(L) ? kFiveBitBlockBytes : B / 2; }
// Signed levels (int8, int8b, iq4_nl) multiply a block at a time (dot_rows), the others by pairs (dot_rows_paired).
constexpr bool signed_levels(Levels L) { return byte_levels(L) || L == Levels::int4_lookup; }
constexpr bool block_min(Levels L) { return L == Levels::int4_block_min || L == Levels::int5_block_min; }
constexpr int32_t fixed_zero(Levels L) {
  switch (L) {
    case Levels::int4_fixed_zero: return kQ40Zero;
    case Levels::int5_fixed_zero: return kQ50Zero;
    case Levels::int4_lookup: return 128;  // its VNNI path takes the looked-up levels plus 128, unsigned (add_two)
    default: return 0;
  }
}

// The weights' raw arrays, read once per call rather than once per row.
struct Weights {
  const uint8_t* data;
  const float* scales;
  const uint8_t* zeros;  // int4z only
  const float* mins;     // q4_1, q5_1 only
  int64_t rows;
  explicit Weights(const QuantizedMatrix& w)
      : data(w.data.data<uint8_t>()), scales(w.scales.data<float>()),
        zeros(w.zeros.defined() ? w.zeros.data<uint8_t>() : nullptr),
        mins(w.mins.defined() ? w.mins.data<float>() : nullptr), rows(w.rows) {}
};

// The even and odd accumulators met lane by lane, then the lanes summed in sum_lanes' order.
template <typename Ops>
inline float merged_total(const typename Ops::Acc& even, const typename Ops::Acc& odd) {
  float e[8], o[8], merged[8];
  Ops::store(even, e);
  Ops::store(odd, o);
  for (int l = 0; l < 8; ++l) merged[l] = e[l] + o[l];
  return sum_lanes(merged);
}

// R outputs, for int8, int8b and iq4_nl: row n of w against rows m0 .. m0 + R - 1
// of the quantized activations, each weight block loaded once for the R of
// them. `Ops` is an instruction path: load(w_block) gives the block's
// levels, and add(acc, levels, x_block, scale) adds its 8 integer lanes
// times scale into acc's 8 f32 lanes. Each output's blocks accumulate in
// order into one Acc, as ggml's vec_dot_q8_0_q8_0 (and tinyBLAS) sum them,
// so a Q8_0 product is ggml's bits. (Even and odd blocks in two chains, as
// this kernel had them, decoded no faster: TinyLlama's Q8_0 on the Xeon with
// AMX, interleaved rounds within 8% either way; two weight rows at once,
// each one chain, ran 8% slower.) Each output's arithmetic is the
// same whatever R, so results do not depend on how rows are grouped, nor
// on the path. The rows_* loops below are flattened, so all of it inlines
// into each path's own instruction set.
template <Levels L, typename Ops, int R>
inline void dot_rows(const Weights& w, int64_t n, const QuantizedActivations& a, int64_t m0, float* out) {
  static_assert(signed_levels(L));
  constexpr int64_t stride = block_bytes(L), blocks_a_line = 64 / stride;
  const int64_t blocks = a.blocks;
  const uint8_t* row = w.data + n * blocks * stride;
  const float* ws = L == Levels::int8 ? nullptr : w.scales + n * blocks;
  const int8_t* xq[R];
  const float* xs[R];
  typename Ops::Acc acc[R], odd[R];
  for (int r = 0; r < R; ++r) {
    xq[r] = a.levels.data() + (m0 + r) * blocks * B;
    xs[r] = a.scales.data() + (m0 + r) * blocks;
    acc[r] = odd[r] = Ops::zero();
  }
  auto block = [&](int64_t b, typename Ops::Acc* into) {
    if (b % blocks_a_line == 0) prefetch_ahead(row + b * stride);
    const typename Ops::Levels levels = Ops::load(row + b * stride);
    for (int r = 0; r < R; ++r)
      Ops::add(into[r], levels, xq[r] + b * B, L == Levels::int8 ? xs[r][b] : xs[r][b] * ws[b]);
  };
  // IQ4_NL's blocks in two chains, even and odd, met lane by lane at the end, as ggml's vec_dot_iq4_nl_q8_0 sums
  // them (its bits, for an even count of blocks). With AVX-512 both chains are one register (add_two).
  constexpr bool two_chains = L == Levels::int4_lookup;
  int64_t b = 0;
  if constexpr (two_chains && requires { Ops::add_two; }) {
    typename Ops::Acc2 both[R];
    for (int r = 0; r < R; ++r) both[r] = Ops::zero2();
    for (; b + 2 <= blocks; b += 2) {
      if (b % blocks_a_line == 0) prefetch_ahead(row + b * stride);
      const auto levels = Ops::load_two(row + b * stride);
      for (int r = 0; r < R; ++r)
        Ops::add_two(both[r], levels, xq[r] + b * B, a.zero_lanes.data() + ((m0 + r) * blocks + b) * 8,
                     xs[r][b] * ws[b], xs[r][b + 1] * ws[b + 1]);
    }
    for (int r = 0; r < R; ++r) Ops::split(both[r], acc[r], odd[r]);
  }
  for (; two_chains && b + 2 <= blocks; b += 2) block(b, acc), block(b + 1, odd);
  for (; b < blocks; ++b) block(b, acc);
  for (int r = 0; r < R; ++r) {
    float lanes[8];
    Ops::store(acc[r], lanes);
    const float total = two_chains ? merged_total<Ops>(acc[r], odd[r]) : sum_lanes(lanes);
    out[(m0 + r) * w.rows + n] = L == Levels::int8 ? total * w.scales[n] : total;
  }
}

// The 4- and 5-bit formats two blocks at a time: the two blocks' low
// nibbles (levels 0-15 of each) fill one register and their high nibbles
// (16-31) another, so a pair is unpacked with one or two loads and two
// masks (the fifth bits or-ed in after), and the activations are stored in
// that order (quantize_activations). Integer lane l of the eight takes, for
// block l / 4 of the pair, levels 4l' .. 4l' + 3 and 16 + 4l' .. 16 + 4l' + 3
// (l' = l % 4); a fixed zero point comes off in integers, lane by lane (the
// activations' zero_lanes). Each lane then adds its block's scale times the
// lane into an f32 lane; even and odd pairs use different accumulators (so
// that consecutive pairs' multiply-adds do not wait on each other). Every
// path and every R gives the same bits.
template <Levels L, typename Ops, int R>
inline void dot_rows_paired(const Weights& w, int64_t n, const QuantizedActivations& a, int64_t m0, float* out) {
  static_assert(!signed_levels(L));
  const int64_t blocks = a.blocks, stored = a.stored_blocks, stride = block_bytes(L);
  const uint8_t* row = w.data + n * blocks * stride;
  const float* ws = w.scales + n * blocks;
  const uint8_t* zeros = L == Levels::int4_block_zero ? w.zeros + n * blocks : nullptr;
  const float* mins = block_min(L) ? w.mins + n * blocks : nullptr;
  const int8_t* xq[R];
  const float* xs[R];
  const int32_t* sums[R];
  const int32_t* zero_lanes[R];
  typename Ops::Acc even[R], odd[R];
  float correction_even[R], correction_odd[R];  // int4z: scale * zero * sum(x levels); q4_1, q5_1: -min * x scale * sum
  for (int r = 0; r < R; ++r) {
    xq[r] = a.levels.data() + (m0 + r) * stored * B;
    xs[r] = a.scales.data() + (m0 + r) * blocks;
    sums[r] = a.sums.data() + (m0 + r) * blocks;
    zero_lanes[r] = a.zero_lanes.data() + (m0 + r) * stored * 4;
    even[r] = odd[r] = Ops::zero();
    correction_even[r] = correction_odd[r] = 0;
  }
  auto pair = [&](int64_t b, bool both, typename Ops::Acc* acc, float* correction) {
    const typename Ops::PairLevels levels = Ops::load_pair(row + b * stride, both);
    for (int r = 0; r < R; ++r) {
      Ops::template add_pair<fixed_zero(L) != 0>(acc[r], levels, xq[r] + b * B, zero_lanes[r] + b * 4,
                                                 Ops::pair_scales(xs[r] + b, ws + b, both));
      for (int64_t i = b; i < b + (both ? 2 : 1); ++i) {
        if constexpr (L == Levels::int4_block_zero)
          correction[r] = std::fma(xs[r][i] * ws[i], float(int32_t(zeros[i]) * sums[r][i]), correction[r]);
        else if constexpr (block_min(L))
          correction[r] = std::fma(-xs[r][i] * mins[i], float(sums[r][i]), correction[r]);
      }
    }
  };
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    for (int64_t line = 0; line < 4 * stride; line += 64) prefetch_ahead(row + b * stride + line);
    pair(b, true, even, correction_even);
    pair(b + 2, true, odd, correction_odd);
  }
  if (b + 2 <= blocks) {
    pair(b, true, even, correction_even);
    b += 2;
  }
  if (b < blocks) pair(b, false, odd, correction_odd);
  for (int r = 0; r < R; ++r)
    out[(m0 + r) * w.rows + n] = merged_total<Ops>(even[r], odd[r]) - (correction_even[r] + correction_odd[r]);
}

template <Levels L>
struct ScalarOps {
  struct Acc {
    float v[8];
  };
  struct Levels {
    int32_t v[B];
  };
  static Acc zero() { return {}; }
  static Levels load(const uint8_t* w) {
    Levels levels;
    if constexpr (L == kiln::cpu::Levels::int4_lookup) {
      uint8_t unpacked[B];
      unpack_levels(w, false, unpacked);
      for (int j = 0; j < B; ++j) levels.v[j] = kIq4nlValues[unpacked[j]];
    } else {
      for (int j = 0; j < B; ++j) levels.v[j] = int8_t(w[j]);
    }
    return levels;
  }
  // Lane l: the sum of products 4l .. 4l + 3.
  static void add(Acc& acc, const Levels& w, const int8_t* x, float scale) {
    for (int l = 0; l < 8; ++l) {
      int32_t lane = 0;
      for (int t = 0; t < 4; ++t) lane += w.v[4 * l + t] * int32_t(x[4 * l + t]);
      acc.v[l] = std::fma(float(lane), scale, acc.v[l]);
    }
  }
  static void store(const Acc& acc, float* out) { std::copy(acc.v, acc.v + 8, out); }

  struct PairLevels {
    int32_t v[2 * B];  // in the activations' paired order
  };
  static PairLevels load_pair(const uint8_t* w, bool both) {
    PairLevels levels{};
    for (int64_t k = 0; k < (both ? 2 : 1); ++k) {
      uint8_t unpacked[B];
      unpack_levels(w + k * block_bytes(L), five_bits(L), unpacked);
      for (int64_t j = 0; j < B; ++j) levels.v[paired_index(k, j)] = unpacked[j];
    }
    return levels;
  }
  // The two blocks' scales: the activations' times the weights' (the lone block's partner: 0).
  struct PairScales {
    float v[2];
  };
  static PairScales pair_scales(const float* xs, const float* ws, bool both) {
    return {{xs[0] * ws[0], both ? xs[1] * ws[1] : 0.0f}};
  }
  template <bool kZeroLanes>
  static void add_pair(Acc& acc, const PairLevels& w, const int8_t* x, const int32_t* zero_lanes,
                       const PairScales& scale) {
    for (int l = 0; l < 8; ++l) {
      int32_t lane = kZeroLanes ? zero_lanes[l] : 0;
      for (int t = 0; t < 4; ++t)
        lane += w.v[4 * l + t] * int32_t(x[4 * l + t]) + w.v[B + 4 * l + t] * int32_t(x[B + 4 * l + t]);
      acc.v[l] = std::fma(float(lane), scale.v[l / 4], acc.v[l]);
    }
  }
};

#ifdef KILN_X86_INTRINSICS
// A block's 32 signed levels: int8's bytes, or IQ4_NL's nibbles (value j
// low, j + 16 high) looked up in kIq4nlValues (vpshufb on each 128-bit half).
template <Levels L>
[[gnu::always_inline]] inline __m256i load_signed_levels(const uint8_t* w) {
  if constexpr (L == Levels::int4_lookup) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m256i indices =
        _mm256_setr_m128i(_mm_and_si128(packed, nibble), _mm_and_si128(_mm_srli_epi16(packed, 4), nibble));
    return _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues))), indices);
  } else {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  }
}

// The operands of an int8 block's byte products: |w|, and the activations
// with w's signs.
[[gnu::always_inline]] inline void signed_operands(__m256i w, const int8_t* x, __m256i& u, __m256i& s) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  u = _mm256_sign_epi8(w, w);
  s = _mm256_sign_epi8(xv, w);
}

// A pair's fifth bits, 0x10 in the bytes of `pair` whose bit is set: of the
// two blocks' words (one 64-bit value in every lane), byte c of the low
// register takes bit c % 8 of word byte c / 8 (the first block, c < 16) or
// 4 + (c - 16) / 8 (the second); the high register bytes 2, 3, 6 and 7. Each
// byte is picked out with the other seven bits set, then compared with all ones.
struct LevelPair {
  __m256i low, high;
};
[[gnu::always_inline]] inline void add_fifth_bits(uint32_t first, uint32_t second, LevelPair& pair) {
  const __m256i words = _mm256_set1_epi64x(int64_t(uint64_t(first) | uint64_t(second) << 32));
  const __m256i other_bits = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  auto spread = [&](__m256i bytes) {
    const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(_mm256_shuffle_epi8(words, bytes), other_bits),
                                          _mm256_set1_epi64x(-1));
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
  };
  pair.low = _mm256_or_si256(pair.low, spread(_mm256_set_epi64x(0x0505050505050505, 0x0404040404040404,
                                                                0x0101010101010101, 0x0000000000000000)));
  pair.high = _mm256_or_si256(pair.high, spread(_mm256_set_epi64x(0x0707070707070707, 0x0606060606060606,
                                                                  0x0303030303030303, 0x0202020202020202)));
}

// Two blocks' unsigned levels (the second's zero when !both) in the paired
// order: levels 0-15 of both, then 16-31 of both.
template <Levels L>
[[gnu::always_inline]] inline LevelPair load_level_pair(const uint8_t* w, bool both) {
  constexpr int64_t stride = block_bytes(L);
  __m256i packed;
  if (five_bits(L) || !both) {
    const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    packed = _mm256_inserti128_si256(
        _mm256_castsi128_si256(first),
        both ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + stride)) : _mm_setzero_si128(), 1);
  } else {
    packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  }
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  LevelPair pair{_mm256_and_si256(packed, nibble), _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble)};
  if constexpr (five_bits(L)) {
    uint32_t first, second = 0;
    std::memcpy(&first, w + B / 2, 4);
    if (both) std::memcpy(&second, w + stride + B / 2, 4);
    add_fifth_bits(first, second, pair);
  }
  return pair;
}

// The pair's two scales (as ScalarOps computes them), each over its block's four lanes.
[[gnu::always_inline]] inline __m256 pair_scales_of(const float* xs, const float* ws, bool both) {
  const __m128 x = both ? _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(xs))) : _mm_load_ss(xs);
  const __m128 w = both ? _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ws))) : _mm_load_ss(ws);
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_mul_ps(x, w)), _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0));
}

template <Levels L>
struct Avx2Ops {
  using Acc = __m256;
  using Levels = __m256i;
  static Acc zero() { return _mm256_setzero_ps(); }
  static Levels load(const uint8_t* w) { return load_signed_levels<L>(w); }
  static void add(Acc& acc, const Levels& w, const int8_t* x, float scale) {
    __m256i u, s;
    signed_operands(w, x, u, s);
    const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(scale), acc);
  }
  static void store(const Acc& acc, float* out) { _mm256_storeu_ps(out, acc); }

  // Two products of at most 31 * 127 a pair of bytes add in 16 bits unsaturated.
  using PairLevels = LevelPair;
  static PairLevels load_pair(const uint8_t* w, bool both) { return load_level_pair<L>(w, both); }
  using PairScales = __m256;
  static PairScales pair_scales(const float* xs, const float* ws, bool both) { return pair_scales_of(xs, ws, both); }
  template <bool kZeroLanes>
  static void add_pair(Acc& acc, const PairLevels& w, const int8_t* x, const int32_t* zero_lanes,
                       const PairScales& scale) {
    const __m256i x_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    const __m256i x_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + B));
    const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(w.low, x_low), _mm256_maddubs_epi16(w.high, x_high));
    __m256i lanes = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    if constexpr (kZeroLanes)
      lanes = _mm256_add_epi32(lanes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(zero_lanes)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), scale, acc);
  }
};

template <Levels L>
struct VnniOps {
  using Acc = __m256;
  using Levels = __m256i;
  KILN_VNNI static Acc zero() { return _mm256_setzero_ps(); }
  KILN_VNNI static Levels load(const uint8_t* w) { return load_signed_levels<L>(w); }
  KILN_VNNI static void add(Acc& acc, const Levels& w, const int8_t* x, float scale) {
    __m256i u, s;
    signed_operands(w, x, u, s);
    const __m256i lanes = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(scale), acc);
  }
  KILN_VNNI static void store(const Acc& acc, float* out) { _mm256_storeu_ps(out, acc); }

  // IQ4_NL two blocks at a time, 512 bits: the levels plus 128 (unsigned, so vpdpbusd takes them without moving
  // their signs; the activations' zero_lanes take the 128 off), blocks b and b + 1 in the low and high halves, as
  // are their f32 lanes: ggml's even and odd chains in one register.
  using Acc2 = __m512;
  KILN_VNNI static Acc2 zero2() { return _mm512_setzero_ps(); }
  KILN_VNNI static __m512i load_two(const uint8_t* w) {
    const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)), nibble = _mm256_set1_epi8(0x0f);
    const __m256i low = _mm256_and_si256(packed, nibble), high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);
    const __m512i halves = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);  // lows of b, b + 1; highs
    const __m512i indices = _mm512_shuffle_i64x2(halves, halves, _MM_SHUFFLE(3, 1, 2, 0));  // b's 32, then b + 1's
    return _mm512_shuffle_epi8(
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlRaised.data()))), indices);
  }
  KILN_VNNI static void add_two(Acc2& acc, __m512i levels, const int8_t* x, const int32_t* zero_lanes, float first,
                                float second) {
    const __m512i lanes = _mm512_dpbusd_epi32(_mm512_loadu_si512(zero_lanes), levels, _mm512_loadu_si512(x));
    const __m512 scales = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                                _mm512_castps128_ps512(_mm_setr_ps(first, second, 0, 0)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), scales, acc);
  }
  KILN_VNNI static void split(const Acc2& both, Acc& even, Acc& odd) {
    even = _mm512_castps512_ps256(both);
    odd = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(both), 1));
  }

  using PairLevels = LevelPair;
  KILN_VNNI static PairLevels load_pair(const uint8_t* w, bool both) { return load_level_pair<L>(w, both); }
  using PairScales = __m256;
  KILN_VNNI static PairScales pair_scales(const float* xs, const float* ws, bool both) {
    return pair_scales_of(xs, ws, both);
  }
  template <bool kZeroLanes>
  KILN_VNNI static void add_pair(Acc& acc, const PairLevels& w, const int8_t* x, const int32_t* zero_lanes,
                                 const PairScales& scale) {
    const __m256i x_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    const __m256i x_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + B));
    const __m256i start =
        kZeroLanes ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(zero_lanes)) : _mm256_setzero_si256();
    const __m256i lanes = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(start, w.low, x_low), w.high, x_high);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), scale, acc);
  }
};
#endif

// Rows n0 .. n1 of w against all M rows, four activation rows at a time.
template <Levels L, typename Ops>
inline void rows_of(const Weights& w, int64_t n0, int64_t n1, const QuantizedActivations& a, int64_t M, float* out) {
  auto dot = [&]<int R>(int64_t n, int64_t m) {
    if constexpr (signed_levels(L)) dot_rows<L, Ops, R>(w, n, a, m, out);
    else dot_rows_paired<L, Ops, R>(w, n, a, m, out);
  };
  for (int64_t n = n0; n < n1; ++n) {
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) dot.template operator()<4>(n, m);
    switch (M - m) {
      case 3: dot.template operator()<3>(n, m); break;
      case 2: dot.template operator()<2>(n, m); break;
      case 1: dot.template operator()<1>(n, m); break;
      default: break;
    }
  }
}

#ifdef KILN_X86_INTRINSICS
template <Levels L>
[[gnu::flatten]] void rows_avx2(const Weights& w, int64_t n0, int64_t n1, const QuantizedActivations& a, int64_t M,
                                float* out) {
  rows_of<L, Avx2Ops<L>>(w, n0, n1, a, M, out);
}
template <Levels L>
[[gnu::flatten, gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] void rows_vnni(
    const Weights& w, int64_t n0, int64_t n1, const QuantizedActivations& a, int64_t M, float* out) {
  rows_of<L, VnniOps<L>>(w, n0, n1, a, M, out);
}
#endif

template <Levels L>
void rows_with(QuantDot dot, const Weights& w, int64_t n0, int64_t n1, const QuantizedActivations& a, int64_t M,
               float* out) {
#ifdef KILN_X86_INTRINSICS
  if (dot == QuantDot::avx2) return rows_avx2<L>(w, n0, n1, a, M, out);
  if (dot == QuantDot::avx512_vnni) return rows_vnni<L>(w, n0, n1, a, M, out);
#endif
  rows_of<L, ScalarOps<L>>(w, n0, n1, a, M, out);
}

void rows(QuantDot dot, const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a, int64_t M,
          float* out) {
  const Weights raw(w);
  switch (levels_of(w.format)) {
    case Levels::int8: return rows_with<Levels::int8>(dot, raw, n0, n1, a, M, out);
    case Levels::int8_block: return rows_with<Levels::int8_block>(dot, raw, n0, n1, a, M, out);
    case Levels::int4_lookup: return rows_with<Levels::int4_lookup>(dot, raw, n0, n1, a, M, out);
    case Levels::int4_fixed_zero: return rows_with<Levels::int4_fixed_zero>(dot, raw, n0, n1, a, M, out);
    case Levels::int4_block_zero: return rows_with<Levels::int4_block_zero>(dot, raw, n0, n1, a, M, out);
    case Levels::int4_block_min: return rows_with<Levels::int4_block_min>(dot, raw, n0, n1, a, M, out);
    case Levels::int5_fixed_zero: return rows_with<Levels::int5_fixed_zero>(dot, raw, n0, n1, a, M, out);
    case Levels::int5_block_min: return rows_with<Levels::int5_block_min>(dot, raw, n0, n1, a, M, out);
  }
}

}  // namespace

QuantDot quant_dot_in_use() {
#ifdef KILN_X86_INTRINSICS
  static const QuantDot dot =
      isa_allows(Isa::avx512) && __builtin_cpu_supports("avx512vnni") ? QuantDot::avx512_vnni : QuantDot::avx2;
  return dot;
#else
  return QuantDot::scalar;
#endif
}

const char* quant_dot_name(QuantDot dot) {
  switch (dot) {
    case QuantDot::scalar: return "scalar";
    case QuantDot::avx2: return "avx2";
    case QuantDot::avx512_vnni: return "avx512_vnni";
  }
  return "?";
}

void quantized_matmul_rows(const float* x, int64_t M, const QuantizedMatrix& w, float* out, QuantDot dot) {
  if (w.k_quant()) return kquant_matmul_rows(x, M, w, out, dot);
  if (w.half())
    return few_rows_times_f16(M, w.rows, w.cols, 1.0f, x, w.cols, bits16(w.data), w.cols, 0.0f, out, w.rows);
  const Levels levels = levels_of(w.format);
  thread_local QuantizedActivations kept;
  QuantizedActivations& a = kept;  // (named in the loop below, kept would be each worker thread's own)
  // Grouped Q8_0's VNNI kernel multiplies its levels plus 128, as IQ4_NL's does (row_group_product.cpp).
  const int32_t zero = w.grouped_rows && w.format == QuantFormat::int8_block ? 128 : fixed_zero(levels);
  quantize_activations(x, M, w.cols, w.blocks(), !signed_levels(levels), zero, a);
  const int64_t grouped = w.grouped_row_end();  // (rows in groups: kiln/core/quantized.h)
  for_row_chunks(
      w.rows, M * w.rows * w.padded_cols(),
      [&](int64_t n0, int64_t n1) {
        const int64_t split = std::clamp(grouped, n0, n1);
        if (n0 < split) row_group_products(dot, w, n0, split, a, M, out);
        if (split < n1) rows(dot, w, split, n1, a, M, out);
      },
      grouped > 0 ? kRowGroup : 1);
}

void CpuBackend::quantized_matmul(const Tensor& x, const QuantizedMatrix& w, Tensor& out) {
  KILN_CHECK(x.dtype() == DType::f32 && out.dtype() == DType::f32 && x.is_contiguous() && out.is_contiguous(),
             "quantized_matmul (cpu): x and out must be contiguous f32");
  const int64_t M = x.size(0);
  const QuantDot dot = quant_dot_in_use();
  if (w.half() && M > kFewRowsF16 && !batch_invariant())  // (f16 weights: no integer products)
    return packed_gemm(M, w.rows, w.cols, 1.0f, x.data<float>(), w.cols, bits16(w.data), PackedSource::f16, true,
                       w.cols, 0.0f, out.data<float>(), w.rows);
  // (batch-invariant mode: the row-by-row kernel at any size)
  if (M < gemm_rows(dot, w) || w.half() || batch_invariant())
    return quantized_matmul_rows(x.data<float>(), M, w, out.data<float>(), dot);
  quantized_gemm(x.data<float>(), M, w, out.data<float>(), dot);
}

void CpuBackend::quantized_embedding(const QuantizedMatrix& w, const Tensor& ids, Tensor& out) {
  KILN_CHECK(out.dtype() == DType::f32 && out.is_contiguous(), "quantized_embedding (cpu): out must be contiguous f32");
  const int64_t n = ids.numel();
  float* o = out.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids.dtype() == DType::i64 ? ids.data<int64_t>()[i] : ids.data<int32_t>()[i];
    KILN_CHECK(id >= 0 && id < w.rows, "embedding: id ", id, " is outside the table's ", w.rows, " rows");
    dequantize_row(w, id, o + i * w.cols);
  }
}

}  // namespace kiln::cpu
