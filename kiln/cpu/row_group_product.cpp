// The grouped products (row_group_product.h). A 4-bit format's group block
// b is eight rows' 16 bytes of nibbles: with AVX-512 two registers, each
// four rows in its 128-bit lanes, against the activation block's low and
// high 16 levels broadcast to every lane (vpdpbusd), the eight rows' scales
// one load, and each conversion and multiply-add four rows'; with AVX2 four
// rows a pass, two to a register. Q8_0's is eight rows' 32 bytes: two rows a
// 512-bit register, one a 256-bit one.
//
// Each format sums as its row-by-row kernel (quantized_matmul.cpp) does, so
// the bits are that kernel's:
//  - Q4_0 as the paired kernel: per block four integer lanes (levels 4l ..
//    4l + 3 and 16 + 4l .. 16 + 4l + 3, from the zero point's lane), in four
//    chains (its even pairs' first and second blocks, then its odd pairs').
//  - IQ4_NL as ggml's even and odd chains: per block eight lanes (levels 4l
//    .. 4l + 3), the low nibbles' four and the high nibbles' four.
//  - Q8_0 as ggml's one chain: per block eight lanes, in block order.
#include "kiln/cpu/row_group_product.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // (512-bit values only inside the flattened, AVX-512-targeted functions)

#include <cmath>

#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {
namespace {

constexpr int64_t B = kQuantBlock;

// One activation row's quantized blocks (QuantizedActivations, row m).
struct ActivationRow {
  const int8_t* levels;
  const float* scales;
  const int32_t* zero_lanes;
};

// Each format: its block's bytes, its chains, the integer lanes a block
// gives a row, the zero lanes the activations hold a block (kiln/cpu/quantized_activations.h).
struct Q40 {
  static constexpr int kBlockBytes = B / 2, kChains = 4, kLanes = 4, kZeroLanes = 4;
  // A lone last block the paired kernel adds as an odd pair's first.
  static int chain_of(int64_t b, int64_t blocks) { return blocks % 4 == 1 && b == blocks - 1 ? 2 : int(b % 4); }
  // Block b's low and high 16 levels, in the pair's order (paired_index).
  static const int8_t* low(const ActivationRow& x, int64_t b) { return x.levels + b / 2 * 2 * B + b % 2 * (B / 2); }
  static const int8_t* high(const ActivationRow& x, int64_t b) { return low(x, b) + B; }
  // The reference's lane l of a row (its block's bytes at w): levels 4l .. 4l + 3 of both halves, from the zero
  // point's lane.
  static int32_t lane(const uint8_t* w, const ActivationRow& x, int64_t b, int l) {
    int32_t sum = x.zero_lanes[b * 4 + l];
    for (int t = 4 * l; t < 4 * l + 4; ++t)
      sum += (w[t] & 0x0f) * int32_t(low(x, b)[t]) + (w[t] >> 4) * int32_t(high(x, b)[t]);
    return sum;
  }
  // The even and odd accumulators met lane by lane, then sum_lanes' tree (lane(c, l): chain c's lane l).
  template <typename Lane>
  static float total(Lane lane) {
    float merged[8];
    for (int l = 0; l < 4; ++l) {
      merged[l] = lane(0, l) + lane(2, l);
      merged[4 + l] = lane(1, l) + lane(3, l);
    }
    return sum_lanes(merged);
  }
};

struct Iq4nl {
  static constexpr int kBlockBytes = B / 2, kChains = 2, kLanes = 8, kZeroLanes = 8;
  static int chain_of(int64_t b, int64_t) { return int(b % 2); }
  static const int8_t* low(const ActivationRow& x, int64_t b) { return x.levels + b * B; }
  static const int8_t* high(const ActivationRow& x, int64_t b) { return low(x, b) + B / 2; }
  // Lanes 0-3 the low nibbles' values, 4-7 the high ones'.
  static int32_t lane(const uint8_t* w, const ActivationRow& x, int64_t b, int l) {
    const bool upper = l >= 4;
    int32_t sum = 0;
    for (int t = 4 * (l % 4); t < 4 * (l % 4) + 4; ++t)
      sum += kIq4nlValues[upper ? w[t] >> 4 : w[t] & 0x0f] * int32_t((upper ? high(x, b) : low(x, b))[t]);
    return sum;
  }
  template <typename Lane>
  static float total(Lane lane) {
    float merged[8];
    for (int l = 0; l < 8; ++l) merged[l] = lane(0, l) + lane(1, l);
    return sum_lanes(merged);
  }
};

// Q8_0 as its row kernel: one chain of eight lanes a block, in block order
// (ggml's vec_dot_q8_0_q8_0). Its activations hold IQ4_NL's zero lanes
// (-128 times each lane's levels' sum: quantized_matmul.cpp), for VNNI's levels plus 128.
struct Q80 {
  static constexpr int kBlockBytes = B, kChains = 1, kLanes = 8, kZeroLanes = 8;
  static int chain_of(int64_t, int64_t) { return 0; }
  static const int8_t* low(const ActivationRow& x, int64_t b) { return x.levels + b * B; }  // (and the 16 after)
  static int32_t lane(const uint8_t* w, const ActivationRow& x, int64_t b, int l) {  // levels 4l .. 4l + 3
    int32_t sum = 0;
    for (int t = 4 * l; t < 4 * l + 4; ++t) sum += int8_t(w[t]) * int32_t(low(x, b)[t]);
    return sum;
  }
  template <typename Lane>
  static float total(Lane lane) {
    float lanes[8];
    for (int l = 0; l < 8; ++l) lanes[l] = lane(0, l);
    return sum_lanes(lanes);
  }
};

// Ops::kRows rows of a group (at `w`, the first row's bytes of block 0; `ws`
// its scale of block 0) against one activation row.
template <typename Ops>
inline void group_product(const uint8_t* w, const float* ws, int64_t blocks, const ActivationRow& x, float* out) {
  using F = typename Ops::Format;
  static_assert(F::kChains <= 4);
  typename Ops::Acc chains[4];  // (only constant indices, so that they stay in registers)
  for (auto& chain : chains) chain = Ops::zero();
  auto add = [&](int64_t b, typename Ops::Acc& chain) {
    const uint8_t* block = w + b * kRowGroup * F::kBlockBytes;  // the group's eight rows' block b
    for (int64_t line = 0; line < kRowGroup * F::kBlockBytes; line += 64) prefetch_ahead(block + line);
    Ops::add(chain, block, x, b, ws + b * kRowGroup);
  };
  int64_t b = 0;
  for (; b + F::kChains <= blocks; b += F::kChains)
    for (int c = 0; c < F::kChains; ++c) add(b + c, chains[c]);
  for (; b < blocks; ++b) {
    const int c = F::chain_of(b, blocks);
    c == 0 ? add(b, chains[0]) : c == 1 ? add(b, chains[1]) : c == 2 ? add(b, chains[2]) : add(b, chains[3]);
  }
  // Each chain's lanes as the registers hold them (Ops::lane_index).
  float lanes[F::kChains][Ops::kRows * F::kLanes];
  for (int c = 0; c < F::kChains; ++c) Ops::store(chains[c], lanes[c]);
  for (int r = 0; r < Ops::kRows; ++r)
    out[r] = F::total([&](int c, int l) { return lanes[c][Ops::lane_index(r, l)]; });
}

template <typename F>
struct ScalarGroupOps {
  using Format = F;
  static constexpr int kRows = kRowGroup;
  struct Acc {
    float v[kRows][F::kLanes];
  };
  static Acc zero() { return {}; }
  static constexpr int lane_index(int r, int l) { return r * F::kLanes + l; }
  static void add(Acc& acc, const uint8_t* w, const ActivationRow& x, int64_t b, const float* ws) {
    for (int r = 0; r < kRows; ++r)
      for (int l = 0; l < F::kLanes; ++l)
        acc.v[r][l] = std::fma(float(F::lane(w + r * F::kBlockBytes, x, b, l)), ws[r] * x.scales[b], acc.v[r][l]);
  }
  static void store(const Acc& acc, float* out) {
    for (int r = 0; r < kRows; ++r)
      for (int l = 0; l < F::kLanes; ++l) out[lane_index(r, l)] = acc.v[r][l];
  }
};

#ifdef KILN_X86_INTRINSICS
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Four rows a pass, two to a 256-bit register. Q4_0: vpmaddubsw's pairs of
// the low and high halves added in 16 bits (at most 2 * 2 * 15 * 127), then
// widened, as the paired kernel's AVX2 path does; IQ4_NL: the looked-up
// levels' magnitudes against the activations with their signs, as its
// row kernel's AVX2 path does.
template <typename F>
struct Avx2GroupOps {
  using Format = F;
  static constexpr int kRows = 4;
  static constexpr int kHalves = F::kLanes / 4;  // Q4_0: one accumulator a register pair; IQ4_NL: low and high lanes
  struct Acc {
    __m256 v[kHalves][2];
  };
  static Acc zero() {
    Acc acc;
    for (auto& half : acc.v) half[0] = half[1] = _mm256_setzero_ps();
    return acc;
  }
  static void add(Acc& acc, const uint8_t* w, const ActivationRow& x, int64_t b, const float* ws) {
    const __m256i x_low = _mm256_broadcastsi128_si256(load128(F::low(x, b)));
    const __m256i x_high = _mm256_broadcastsi128_si256(load128(F::high(x, b)));
    const __m256i nibble = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256 scales = _mm256_castps128_ps256(_mm_mul_ps(_mm_loadu_ps(ws), _mm_set1_ps(x.scales[b])));
    for (int h = 0; h < 2; ++h) {  // rows 2h, 2h + 1
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * h));
      const __m256i low = _mm256_and_si256(packed, nibble);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);
      const int r = 2 * h;
      const __m256 row_scales =
          _mm256_permutevar8x32_ps(scales, _mm256_setr_epi32(r, r, r, r, r + 1, r + 1, r + 1, r + 1));
      if constexpr (F::kLanes == 4) {
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(low, x_low), _mm256_maddubs_epi16(high, x_high));
        const __m256i zero = _mm256_broadcastsi128_si256(load128(x.zero_lanes + b * 4));
        const __m256i lanes = _mm256_add_epi32(_mm256_madd_epi16(pairs, ones), zero);
        acc.v[0][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), row_scales, acc.v[0][h]);
      } else {
        const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4nlValues));
        const __m256i levels[2] = {_mm256_shuffle_epi8(table, low), _mm256_shuffle_epi8(table, high)};
        const __m256i xs[2] = {x_low, x_high};
        for (int k = 0; k < 2; ++k) {
          const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(levels[k], levels[k]),
                                                        _mm256_sign_epi8(xs[k], levels[k]));
          acc.v[k][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(products, ones)), row_scales, acc.v[k][h]);
        }
      }
    }
  }
  // [lanes 4k .. 4k + 3][row][4]
  static constexpr int lane_index(int r, int l) { return (l / 4 * kRows + r) * 4 + l % 4; }
  static void store(const Acc& acc, float* out) {
    for (int k = 0; k < kHalves; ++k)
      for (int h = 0; h < 2; ++h) _mm256_storeu_ps(out + (k * kRows + 2 * h) * 4, acc.v[k][h]);
  }
};

// The eight rows a pass, four to a 512-bit register.
template <typename F>
struct VnniGroupOps {
  using Format = F;
  static constexpr int kRows = kRowGroup;
  static constexpr int kHalves = F::kLanes / 4;
  struct Acc {
    __m512 v[kHalves][2];
  };
  KILN_VNNI static Acc zero() {
    Acc acc;
    for (auto& half : acc.v) half[0] = half[1] = _mm512_setzero_ps();
    return acc;
  }
  KILN_VNNI static void add(Acc& acc, const uint8_t* w, const ActivationRow& x, int64_t b, const float* ws) {
    const __m512i x_low = _mm512_broadcast_i32x4(load128(F::low(x, b)));
    const __m512i x_high = _mm512_broadcast_i32x4(load128(F::high(x, b)));
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    const __m512 scales = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_loadu_ps(ws), _mm256_set1_ps(x.scales[b])));
    for (int h = 0; h < 2; ++h) {  // rows 4h .. 4h + 3
      const __m512i packed = _mm512_loadu_si512(w + 64 * h);
      __m512i low = _mm512_and_si512(packed, nibble), high = _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble);
      const int r = 4 * h;
      const __m512i rows = _mm512_setr_epi32(r, r, r, r, r + 1, r + 1, r + 1, r + 1, r + 2, r + 2, r + 2, r + 2, r + 3,
                                             r + 3, r + 3, r + 3);
      const __m512 row_scales = _mm512_permutexvar_ps(rows, scales);
      if constexpr (F::kLanes == 4) {
        const __m512i zero = _mm512_broadcast_i32x4(load128(x.zero_lanes + b * 4));
        const __m512i lanes = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, low, x_low), high, x_high);
        acc.v[0][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), row_scales, acc.v[0][h]);
      } else {
        const __m512i table = _mm512_broadcast_i32x4(load128(kIq4nlRaised.data()));
        low = _mm512_shuffle_epi8(table, low);
        high = _mm512_shuffle_epi8(table, high);
        const __m512i lanes[2] = {
            _mm512_dpbusd_epi32(_mm512_broadcast_i32x4(load128(x.zero_lanes + b * 8)), low, x_low),
            _mm512_dpbusd_epi32(_mm512_broadcast_i32x4(load128(x.zero_lanes + b * 8 + 4)), high, x_high)};
        for (int k = 0; k < 2; ++k)
          acc.v[k][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes[k]), row_scales, acc.v[k][h]);
      }
    }
  }
  static constexpr int lane_index(int r, int l) { return (l / 4 * kRows + r) * 4 + l % 4; }
  KILN_VNNI static void store(const Acc& acc, float* out) {
    for (int k = 0; k < kHalves; ++k)
      for (int h = 0; h < 2; ++h) _mm512_storeu_ps(out + (k * kRows + 4 * h) * 4, acc.v[k][h]);
  }
};

// Q8_0: a row's block fills a 256-bit register; its magnitudes against the
// activations with its signs, as the row kernel's AVX2 path multiplies them.
template <>
struct Avx2GroupOps<Q80> {
  using Format = Q80;
  static constexpr int kRows = 4;
  struct Acc {
    __m256 v[kRows];
  };
  static Acc zero() { return {{_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}}; }
  static constexpr int lane_index(int r, int l) { return r * 8 + l; }
  static void add(Acc& acc, const uint8_t* w, const ActivationRow& x, int64_t b, const float* ws) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(Q80::low(x, b)));
    for (int r = 0; r < kRows; ++r) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * B));
      const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
      acc.v[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(products, _mm256_set1_epi16(1))),
                                 _mm256_set1_ps(ws[r] * x.scales[b]), acc.v[r]);
    }
  }
  static void store(const Acc& acc, float* out) {
    for (int r = 0; r < kRows; ++r) _mm256_storeu_ps(out + r * 8, acc.v[r]);
  }
};

// Q8_0: two rows a 512-bit register, the activation block in both halves;
// vpdpbusd on the levels plus 128 (unsigned), from the zero lanes that take the 128 off.
template <>
struct VnniGroupOps<Q80> {
  using Format = Q80;
  static constexpr int kRows = kRowGroup;
  struct Acc {
    __m512 v[kRows / 2];
  };
  KILN_VNNI static Acc zero() {
    return {{_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()}};
  }
  static constexpr int lane_index(int r, int l) { return r * 8 + l; }
  KILN_VNNI static void add(Acc& acc, const uint8_t* w, const ActivationRow& x, int64_t b, const float* ws) {
    const __m512i xv = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(Q80::low(x, b))));
    const __m512i zero =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.zero_lanes + b * 8)));
    const __m512 scales = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_loadu_ps(ws), _mm256_set1_ps(x.scales[b])));
    for (int h = 0; h < kRows / 2; ++h) {  // rows 2h, 2h + 1
      const __m512i raised = _mm512_xor_si512(_mm512_loadu_si512(w + 2 * B * h), _mm512_set1_epi8(char(0x80)));
      const __m512i lanes = _mm512_dpbusd_epi32(zero, raised, xv);
      const int r = 2 * h;
      const __m512 row_scales = _mm512_permutexvar_ps(
          _mm512_setr_epi32(r, r, r, r, r, r, r, r, r + 1, r + 1, r + 1, r + 1, r + 1, r + 1, r + 1, r + 1), scales);
      acc.v[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), row_scales, acc.v[h]);
    }
  }
  KILN_VNNI static void store(const Acc& acc, float* out) {
    for (int h = 0; h < kRows / 2; ++h) _mm512_storeu_ps(out + 16 * h, acc.v[h]);
  }
};
#endif

template <template <typename> class Ops, typename F>
inline void groups_of(const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a, int64_t M,
                      float* out) {
  const int64_t blocks = a.blocks;
  const uint8_t* data = w.data.data<uint8_t>();
  const float* scales = w.scales.data<float>();
  for (int64_t n = n0; n < n1; n += kRowGroup)
    for (int64_t m = 0; m < M; ++m) {
      const ActivationRow x{a.levels.data() + m * a.stored_blocks * B, a.scales.data() + m * blocks,
                            a.zero_lanes.data() + m * a.stored_blocks * F::kZeroLanes};
      for (int64_t r = 0; r < kRowGroup; r += Ops<F>::kRows)  // (AVX2: the group's two halves in turn)
        group_product<Ops<F>>(data + (w.block_index(n) + r) * F::kBlockBytes, scales + w.block_index(n) + r, blocks, x,
                              out + m * w.rows + n + r);
    }
}

template <typename F>
void groups_scalar(const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a, int64_t M,
                   float* out) {
  groups_of<ScalarGroupOps, F>(w, n0, n1, a, M, out);
}
#ifdef KILN_X86_INTRINSICS
template <typename F>
[[gnu::flatten]] void groups_avx2(const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a,
                                  int64_t M, float* out) {
  groups_of<Avx2GroupOps, F>(w, n0, n1, a, M, out);
}
template <typename F>
[[gnu::flatten]] KILN_VNNI void groups_vnni(const QuantizedMatrix& w, int64_t n0, int64_t n1,
                                            const QuantizedActivations& a, int64_t M, float* out) {
  groups_of<VnniGroupOps, F>(w, n0, n1, a, M, out);
}
#endif

template <typename F>
void groups_with(QuantDot dot, const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a,
                 int64_t M, float* out) {
#ifdef KILN_X86_INTRINSICS
  if (dot == QuantDot::avx2) return groups_avx2<F>(w, n0, n1, a, M, out);
  if (dot == QuantDot::avx512_vnni) return groups_vnni<F>(w, n0, n1, a, M, out);
#endif
  groups_scalar<F>(w, n0, n1, a, M, out);
}

}  // namespace

void row_group_products(QuantDot dot, const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a,
                        int64_t M, float* out) {
  if (w.format == QuantFormat::iq4_nl) return groups_with<Iq4nl>(dot, w, n0, n1, a, M, out);
  if (w.format == QuantFormat::int8_block) return groups_with<Q80>(dot, w, n0, n1, a, M, out);
  groups_with<Q40>(dot, w, n0, n1, a, M, out);
}

}  // namespace kiln::cpu
