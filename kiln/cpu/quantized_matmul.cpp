// Quantized products for decoding, as llama.cpp computes them: the
// activations are quantized to int8 per block of 32 (scale max|x| / 127),
// each block's dot product with a weight row runs in integers, and the f32
// sum of the blocks is scaled once. A decoding step is one row per sequence,
// so the product reads every weight once: int8 halves and int4 quarters what
// bf16 reads, which is what bounds its speed.
//
// The block dot: 32 byte products summed four at a time into eight int32
// lanes. AVX2's vpmaddubsw (u8 x s8 -> pairs in s16) then vpmaddwd with ones
// gives exactly the lanes AVX-512 VNNI's vpdpbusd gives in one instruction,
// so the f32 work that follows (one fused multiply-add per lane and block,
// then a fixed tree over the lanes) makes every path, the scalar one
// included, give the same bits. vpmaddubsw takes an unsigned operand: int4
// levels are unsigned already; int8 weights go in as |w| with the signs
// moved onto the activations (vpsignb). Neither saturates: levels stop at
// +-127, so a pair of products is at most 2 * 127 * 127 < 2^15.
#include "kiln/cpu/quantized_matmul.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {
namespace {

constexpr int64_t B = kQuantBlock;

// Activations quantized per row and block: levels, scales and level sums
// (the int4 zero point's correction).
struct QuantizedActivations {
  int64_t blocks;
  std::vector<int8_t> levels;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

QuantizedActivations quantize_activations(const float* x, int64_t M, int64_t K, int64_t blocks) {
  QuantizedActivations a{blocks, std::vector<int8_t>(size_t(M * blocks * B)), std::vector<float>(size_t(M * blocks)),
                         std::vector<int32_t>(size_t(M * blocks))};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < blocks; ++b) {
      float v[B];
      for (int64_t j = 0; j < B; ++j) v[j] = b * B + j < K ? x[m * K + b * B + j] : 0.0f;
      float amax = 0;
      for (float f : v) amax = std::max(amax, std::abs(f));
      const float scale = amax / 127.0f, inverse = scale > 0 ? 1.0f / scale : 0.0f;
      int8_t* q = a.levels.data() + (m * blocks + b) * B;
      int32_t sum = 0;
      for (int64_t j = 0; j < B; ++j) sum += q[j] = int8_t(std::nearbyint(v[j] * inverse));
      a.scales[size_t(m * blocks + b)] = scale;
      a.sums[size_t(m * blocks + b)] = sum;
    }
  return a;
}

// The 32 weight bytes of block b of an int4 row, unpacked to levels in column order.
inline void unpack_int4(const uint8_t* packed, uint8_t* levels) {
  for (int j = 0; j < B / 2; ++j) {
    levels[j] = packed[j] & 0x0f;
    levels[j + B / 2] = packed[j] >> 4;
  }
}

// Lane l of a block: the sum of products 4l .. 4l + 3.
void lanes_scalar(const uint8_t* w, const int8_t* x, bool int4, int32_t* lanes) {
  uint8_t unpacked[B];
  if (int4) unpack_int4(w, unpacked);
  for (int l = 0; l < 8; ++l) {
    int32_t s = 0;
    for (int t = 0; t < 4; ++t) {
      const int j = 4 * l + t;
      s += (int4 ? int32_t(unpacked[j]) : int32_t(int8_t(w[j]))) * int32_t(x[j]);
    }
    lanes[l] = s;
  }
}

// The fixed order of the lanes' sum: lanes i and i + 4, then i and i + 2, then the two.
inline float sum_lanes(const float* a) {
  const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}

// One output: row n of w against one row of quantized activations. The
// rows_* loops below are flattened, so this and the lanes inline into each
// path's own instruction set.
// `Lanes(w_block, x_block, acc, scale)` adds lanes * scale into the 8 accumulators.
template <typename Lanes>
inline float dot_row(const QuantizedMatrix& w, int64_t n, const QuantizedActivations& a, int64_t m, Lanes lanes) {
  const int64_t blocks = a.blocks;
  const int8_t* xq = a.levels.data() + m * blocks * B;
  const float* xs = a.scales.data() + m * blocks;
  alignas(32) float acc[8] = {};
  if (w.format == QuantFormat::int8) {
    const uint8_t* row = w.data.data<uint8_t>() + n * blocks * B;
    for (int64_t b = 0; b < blocks; ++b) lanes(row + b * B, xq + b * B, acc, xs[b]);
    return sum_lanes(acc) * w.scales.data<float>()[n];
  }
  const uint8_t* row = w.data.data<uint8_t>() + n * blocks * (B / 2);
  const float* ws = w.scales.data<float>() + n * blocks;
  const uint8_t* zeros = w.zeros.defined() ? w.zeros.data<uint8_t>() + n * blocks : nullptr;
  const int32_t* sums = a.sums.data() + m * blocks;
  float correction = 0;  // sum over blocks of scale * zero * sum(x levels)
  for (int64_t b = 0; b < blocks; ++b) {
    const float scale = xs[b] * ws[b];
    lanes(row + b * (B / 2), xq + b * B, acc, scale);
    correction = std::fma(scale, float((zeros ? zeros[b] : 8) * sums[b]), correction);
  }
  return sum_lanes(acc) - correction;
}

struct ScalarLanes {
  bool int4;
  void operator()(const uint8_t* w, const int8_t* x, float* acc, float scale) const {
    int32_t lanes[8];
    lanes_scalar(w, x, int4, lanes);
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(float(lanes[l]), scale, acc[l]);
  }
};

#ifdef KILN_X86_INTRINSICS
// The 32 bytes of a block as unsigned operand and signed operand.
template <bool Int4>
[[gnu::always_inline]] inline void operands(const uint8_t* w, const int8_t* x, __m256i& u, __m256i& s) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  if constexpr (Int4) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    const __m128i nibble = _mm_set1_epi8(0x0f);
    u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), nibble), _mm_and_si128(packed, nibble));
    s = xv;
  } else {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    u = _mm256_sign_epi8(wv, wv);
    s = _mm256_sign_epi8(xv, wv);
  }
}

template <bool Int4>
struct Avx2Lanes {
  void operator()(const uint8_t* w, const int8_t* x, float* acc, float scale) const {
    __m256i u, s;
    operands<Int4>(w, x, u, s);
    const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
    const __m256 a = _mm256_load_ps(acc);
    _mm256_store_ps(acc, _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(scale), a));
  }
};

template <bool Int4>
struct VnniLanes {
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] void operator()(
      const uint8_t* w, const int8_t* x, float* acc, float scale) const {
    __m256i u, s;
    operands<Int4>(w, x, u, s);
    const __m256i lanes = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
    const __m256 a = _mm256_load_ps(acc);
    _mm256_store_ps(acc, _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(scale), a));
  }
};

template <typename Lanes>
[[gnu::flatten]] void rows_avx2(const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a, int64_t M,
               float* out, Lanes lanes) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) out[m * w.rows + n] = dot_row(w, n, a, m, lanes);
}
template <typename Lanes>
[[gnu::flatten, gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] void rows_vnni(const QuantizedMatrix& w, int64_t n0,
                                                                      int64_t n1, const QuantizedActivations& a,
                                                                      int64_t M, float* out, Lanes lanes) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) out[m * w.rows + n] = dot_row(w, n, a, m, lanes);
}
#endif

void rows(QuantDot dot, const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a, int64_t M,
          float* out) {
  const bool int4 = w.format != QuantFormat::int8;
#ifdef KILN_X86_INTRINSICS
  if (dot == QuantDot::avx2)
    return int4 ? rows_avx2(w, n0, n1, a, M, out, Avx2Lanes<true>{}) : rows_avx2(w, n0, n1, a, M, out, Avx2Lanes<false>{});
  if (dot == QuantDot::avx512_vnni)
    return int4 ? rows_vnni(w, n0, n1, a, M, out, VnniLanes<true>{}) : rows_vnni(w, n0, n1, a, M, out, VnniLanes<false>{});
#endif
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) out[m * w.rows + n] = dot_row(w, n, a, m, ScalarLanes{int4});
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
  const QuantizedActivations a = quantize_activations(x, M, w.cols, w.blocks());
  // Rows of w in chunks over the threads; each output is one thread's alone.
  const int64_t N = w.rows, work = M * N * w.padded_cols();
  const int threads = work < (int64_t(1) << 18) ? 1 : get_num_threads();
  const int64_t chunk = std::max<int64_t>(8, (N + threads * 4 - 1) / (threads * 4));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t n0 = 0; n0 < N; n0 += chunk) rows(dot, w, n0, std::min(N, n0 + chunk), a, M, out);
}

void CpuBackend::quantized_matmul(const Tensor& x, const QuantizedMatrix& w, Tensor& out) {
  KILN_CHECK(x.dtype() == DType::f32 && out.dtype() == DType::f32 && x.is_contiguous() && out.is_contiguous(),
             "quantized_matmul (cpu): x and out must be contiguous f32");
  const int64_t M = x.size(0);
  if (M < kWidenedRows) return quantized_matmul_rows(x.data<float>(), M, w, out.data<float>(), quant_dot_in_use());
  // A prompt: widen the weights once and run one SGEMM, on the activations
  // as the integer kernel sees them (rounded to their int8 levels), so a
  // prompt's logits are a decoding step's up to the order of the sums.
  MemoryCategoryScope workspace(MemoryCategory::workspace);
  Tensor widened = Tensor::empty({w.rows, w.cols}, DType::f32), rounded = Tensor::empty({M, w.cols}, DType::f32);
  float* values = widened.data<float>();
#pragma omp parallel for
  for (int64_t n = 0; n < w.rows; ++n) dequantize_row(w, n, values + n * w.cols);
  const QuantizedActivations a = quantize_activations(x.data<float>(), M, w.cols, w.blocks());
  float* r = rounded.data<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < w.cols; ++k)
      r[m * w.cols + k] = a.scales[size_t(m * a.blocks + k / B)] * float(a.levels[size_t(m * a.blocks * B + k)]);
  Tensor transposed = widened.as_strided({w.cols, w.rows}, {1, w.cols}, 0);
  matmul(rounded, transposed, out, MatmulArgs{});
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
