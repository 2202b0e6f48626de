// The grouped int4 product (row_group_product.h). A group's block b is
// eight rows' 16 bytes of nibbles: with AVX-512 two registers, each four
// rows in its 128-bit lanes, against the activation block's low and high
// 16 levels broadcast to every lane (vpdpbusd), the eight rows' scales one
// load, and each conversion and multiply-add four rows'; with AVX2 four
// rows a pass, two to a register.
#include "kiln/cpu/row_group_product.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // (512-bit values only inside the flattened, AVX-512-targeted functions)

#include <cmath>

#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {
namespace {

constexpr int64_t B = kQuantBlock;
constexpr int64_t kGroupBlockBytes = kRowGroup * B / 2;  // a group's block: its eight rows' 16 bytes

// The chain block b adds into: the paired kernel's even pairs' first and
// second blocks (chains 0, 1), then its odd pairs' (2, 3); a lone last
// block it adds as an odd pair's first.
constexpr int chain_of(int64_t b, int64_t blocks) { return blocks % 4 == 1 && b == blocks - 1 ? 2 : int(b % 4); }

// Row r's total from its four chains' four lanes each (c[chain][lane]), in
// the paired kernel's order: the even and odd accumulators met lane by lane,
// then sum_lanes' tree.
inline float chains_total(const float (&c)[4][4]) {
  float merged[8];
  for (int l = 0; l < 4; ++l) {
    merged[l] = c[0][l] + c[2][l];
    merged[4 + l] = c[1][l] + c[3][l];
  }
  return sum_lanes(merged);
}

// Ops::kRows rows of a group (at `w`, the first row's bytes of block 0; `ws`
// the first row's scale of block 0) against one activation row.
template <typename Ops>
inline void group_product(const uint8_t* w, const float* ws, int64_t blocks, const int8_t* x, const float* xs,
                          const int32_t* zero_lanes, float* out) {
  typename Ops::Acc chains[4] = {Ops::zero(), Ops::zero(), Ops::zero(), Ops::zero()};
  auto add = [&](int64_t b, typename Ops::Acc& chain) {
    const uint8_t* block = w + b * kGroupBlockBytes;
    prefetch_ahead(block);
    prefetch_ahead(block + 64);
    const int8_t* low = x + b / 2 * 2 * B + b % 2 * (B / 2);  // the pair's order (paired_index): lows, then highs
    Ops::add(chain, block, low, low + B, zero_lanes + b * 4, ws + b * kRowGroup, xs[b]);
  };
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) add(b, chains[0]), add(b + 1, chains[1]), add(b + 2, chains[2]), add(b + 3, chains[3]);
  for (; b < blocks; ++b) add(b, chains[chain_of(b, blocks)]);
  float lanes[4][Ops::kRows][4];
  for (int c = 0; c < 4; ++c) Ops::store(chains[c], lanes[c]);
  for (int r = 0; r < Ops::kRows; ++r) {
    const float c[4][4] = {{lanes[0][r][0], lanes[0][r][1], lanes[0][r][2], lanes[0][r][3]},
                           {lanes[1][r][0], lanes[1][r][1], lanes[1][r][2], lanes[1][r][3]},
                           {lanes[2][r][0], lanes[2][r][1], lanes[2][r][2], lanes[2][r][3]},
                           {lanes[3][r][0], lanes[3][r][1], lanes[3][r][2], lanes[3][r][3]}};
    out[r] = chains_total(c);
  }
}

struct ScalarGroupOps {
  static constexpr int kRows = kRowGroup;
  struct Acc {
    float v[kRows][4];
  };
  static Acc zero() { return {}; }
  // Lane l of row r: levels 4l .. 4l + 3 (low nibbles) and 16 + 4l .. 16 + 4l + 3 (high), from the fixed zero's lane.
  static void add(Acc& acc, const uint8_t* w, const int8_t* low, const int8_t* high, const int32_t* zero_lanes,
                  const float* ws, float xs) {
    for (int r = 0; r < kRows; ++r)
      for (int l = 0; l < 4; ++l) {
        int32_t lane = zero_lanes[l];
        for (int t = 4 * l; t < 4 * l + 4; ++t)
          lane += (w[r * 16 + t] & 0x0f) * int32_t(low[t]) + (w[r * 16 + t] >> 4) * int32_t(high[t]);
        acc.v[r][l] = std::fma(float(lane), ws[r] * xs, acc.v[r][l]);
      }
  }
  static void store(const Acc& acc, float (*out)[4]) {
    for (int r = 0; r < kRows; ++r)
      for (int l = 0; l < 4; ++l) out[r][l] = acc.v[r][l];
  }
};

#ifdef KILN_X86_INTRINSICS
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Four rows a pass, two to a 256-bit register: vpmaddubsw's pairs of the
// low and high halves added in 16 bits (at most 2 * 2 * 15 * 127), then
// widened, as the paired kernel's AVX2 path does.
struct Avx2GroupOps {
  static constexpr int kRows = 4;
  struct Acc {
    __m256 v[2];
  };
  static Acc zero() { return {{_mm256_setzero_ps(), _mm256_setzero_ps()}}; }
  static void add(Acc& acc, const uint8_t* w, const int8_t* low, const int8_t* high, const int32_t* zero_lanes,
                  const float* ws, float xs) {
    const __m256i x_low = _mm256_broadcastsi128_si256(load128(low)), x_high = _mm256_broadcastsi128_si256(load128(high));
    const __m256i zero = _mm256_broadcastsi128_si256(load128(zero_lanes)), nibble = _mm256_set1_epi8(0x0f);
    const __m256 scales = _mm256_castps128_ps256(_mm_mul_ps(_mm_loadu_ps(ws), _mm_set1_ps(xs)));
    for (int h = 0; h < 2; ++h) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * h));
      const __m256i pairs =
          _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(packed, nibble), x_low),
                           _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble), x_high));
      const __m256i lanes = _mm256_add_epi32(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)), zero);
      const __m256 row_scales = _mm256_permutevar8x32_ps(scales, _mm256_setr_epi32(2 * h, 2 * h, 2 * h, 2 * h, 2 * h + 1,
                                                                                  2 * h + 1, 2 * h + 1, 2 * h + 1));
      acc.v[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), row_scales, acc.v[h]);
    }
  }
  static void store(const Acc& acc, float (*out)[4]) {
    _mm256_storeu_ps(out[0], acc.v[0]);
    _mm256_storeu_ps(out[2], acc.v[1]);
  }
};

#define KILN_VNNI [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]]
// The eight rows a pass, four to a 512-bit register.
struct VnniGroupOps {
  static constexpr int kRows = kRowGroup;
  struct Acc {
    __m512 v[2];
  };
  KILN_VNNI static Acc zero() { return {{_mm512_setzero_ps(), _mm512_setzero_ps()}}; }
  KILN_VNNI static void add(Acc& acc, const uint8_t* w, const int8_t* low, const int8_t* high,
                            const int32_t* zero_lanes, const float* ws, float xs) {
    const __m512i x_low = _mm512_broadcast_i32x4(load128(low)), x_high = _mm512_broadcast_i32x4(load128(high));
    const __m512i zero = _mm512_broadcast_i32x4(load128(zero_lanes)), nibble = _mm512_set1_epi8(0x0f);
    const __m512 scales = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_loadu_ps(ws), _mm256_set1_ps(xs)));
    for (int h = 0; h < 2; ++h) {
      const __m512i packed = _mm512_loadu_si512(w + 64 * h);
      const __m512i lanes =
          _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, _mm512_and_si512(packed, nibble), x_low),
                              _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble), x_high);
      const int r = 4 * h;
      const __m512 row_scales = _mm512_permutexvar_ps(
          _mm512_setr_epi32(r, r, r, r, r + 1, r + 1, r + 1, r + 1, r + 2, r + 2, r + 2, r + 2, r + 3, r + 3, r + 3, r + 3),
          scales);
      acc.v[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), row_scales, acc.v[h]);
    }
  }
  KILN_VNNI static void store(const Acc& acc, float (*out)[4]) {
    _mm512_storeu_ps(out[0], acc.v[0]);
    _mm512_storeu_ps(out[4], acc.v[1]);
  }
};
#endif

template <typename Ops>
inline void groups_of(const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a, int64_t M,
                      float* out) {
  const int64_t blocks = a.blocks;
  const uint8_t* data = w.data.data<uint8_t>();
  const float* scales = w.scales.data<float>();
  for (int64_t n = n0; n < n1; n += kRowGroup)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t r = 0; r < kRowGroup; r += Ops::kRows)  // (AVX2: the group's two halves in turn)
        group_product<Ops>(data + w.block_index(n) * (B / 2) + r * (B / 2), scales + w.block_index(n) + r,
                           blocks, a.levels.data() + m * a.stored_blocks * B, a.scales.data() + m * blocks,
                           a.zero_lanes.data() + m * a.stored_blocks * 4, out + m * w.rows + n + r);
}

#ifdef KILN_X86_INTRINSICS
[[gnu::flatten]] void groups_avx2(const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a,
                                  int64_t M, float* out) {
  groups_of<Avx2GroupOps>(w, n0, n1, a, M, out);
}
[[gnu::flatten]] KILN_VNNI void groups_vnni(const QuantizedMatrix& w, int64_t n0, int64_t n1,
                                            const QuantizedActivations& a, int64_t M, float* out) {
  groups_of<VnniGroupOps>(w, n0, n1, a, M, out);
}
#endif

}  // namespace

void row_group_products(QuantDot dot, const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a,
                        int64_t M, float* out) {
#ifdef KILN_X86_INTRINSICS
  if (dot == QuantDot::avx2) return groups_avx2(w, n0, n1, a, M, out);
  if (dot == QuantDot::avx512_vnni) return groups_vnni(w, n0, n1, a, M, out);
#endif
  groups_of<ScalarGroupOps>(w, n0, n1, a, M, out);
}

}  // namespace kiln::cpu
