// Quantized weights: the formats round-trip within half a level, every
// instruction path of the integer product gives the scalar path's bits at
// any thread count, the product is within activation quantization of the
// f32 product of the same weights, the input's gradient is the dequantized
// weights', and a loaded model quantized keeps
// generating what it scored (decoding equals the prompt pass).
#include <algorithm>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <utility>

#include "kiln/autograd/ops.h"
#include "kiln/backend/backend.h"
#include "kiln/core/quantized.h"
#include "kiln/core/quantized_k.h"
#include "kiln/backend/batch_invariant.h"
#include "kiln/cpu/few_rows_product.h"
#include "kiln/cpu/kquant_matmul.h"
#include "kiln/cpu/quantized_gemm.h"
#include "kiln/cpu/quantized_matmul.h"
#include "kiln/io/gguf_quants.h"
#include "kiln/nn/layers.h"
#include "models/hf/hf_model.h"
#include "tests/hf_test_util.h"

namespace kiln {
namespace {

// Rows enough for a prompt's GEMM on every path.
constexpr int64_t kPromptRows = cpu::gemm_rows(cpu::QuantDot::avx2);

const QuantFormat kFormats[] = {QuantFormat::int8, QuantFormat::int4, QuantFormat::int4_zero, QuantFormat::int8_block};
// GGUF's formats Kiln multiplies as the file's blocks of 256, and those it reads into blocks of 32.
const QuantFormat kBlocksOf256[] = {QuantFormat::q2_k, QuantFormat::q3_k, QuantFormat::q4_k,
                                    QuantFormat::q5_k, QuantFormat::q6_k, QuantFormat::iq4_xs};
const GgufType kGgufBlocksOf32[] = {GgufType::Q4_1, GgufType::Q5_1, GgufType::Q8_0,
                                    GgufType::Q4_0, GgufType::Q5_0, GgufType::IQ4_NL};

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = normal(gen);
  return v;
}

// The largest step between levels in row r (what rounding may cost, twice).
float step_of(const QuantizedMatrix& q, int64_t r) {
  if (q.format == QuantFormat::int8) return q.scales.data<float>()[r];
  float s = 0;
  for (int64_t b = 0; b < q.blocks(); ++b) s = std::max(s, std::abs(q.scales.data<float>()[r * q.blocks() + b]));
  return s;
}

TEST(Quantized, FormatsRoundTripWithinHalfALevelOrQ40sClamp) {
  const int64_t rows = 7, cols = 45;  // a partial last block
  const auto w = random_values(size_t(rows * cols), 1);
  for (QuantFormat f : kFormats) {
    const QuantizedMatrix q = quantize_matrix(w.data(), rows, cols, f, DType::f32);
    EXPECT_EQ(q.padded_cols(), 64);
    EXPECT_EQ(q.bytes(), f == QuantFormat::int8         ? size_t(rows * 64 + rows * 4)
                         : f == QuantFormat::int8_block ? size_t(rows * 64 + rows * 2 * 4)
                         : f == QuantFormat::int4       ? size_t(rows * 32 + rows * 2 * 4)
                                                        : size_t(rows * 32 + rows * 2 * 5));
    EXPECT_EQ(q.bytes(), quantized_bytes(f, rows, cols));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(q, r, row.data());
      // Q4_0 puts 8 levels on the side of the largest magnitude and 7 on the
      // other: a value there beyond 7 levels clamps, within one level.
      const float half = step_of(q, r) * (f == QuantFormat::int4 ? 1.0f : 0.5f) * 1.0001f;
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_LE(std::abs(row[size_t(c)] - w[size_t(r * cols + c)]), half) << quant_format_name(f) << " " << r << "," << c;
    }
  }
  EXPECT_EQ(parse_quant_format("int4z"), QuantFormat::int4_zero);
  EXPECT_EQ(parse_quant_format("int8b"), QuantFormat::int8_block);
  EXPECT_THROW(parse_quant_format("q4_k"), Error);
}

// The product on every SIMD path this machine has, at 1 and 2 threads, in
// the scalar path's bits (which it returns): the decoding kernel's, or
// `product`'s (the prompt GEMM's).
using Product = void (*)(const float*, int64_t, const QuantizedMatrix&, float*, cpu::QuantDot);
std::vector<float> every_path_gives_scalar_bits(const QuantizedMatrix& q, const std::vector<float>& x, int64_t M,
                                                Product product = cpu::quantized_matmul_rows) {
  std::vector<cpu::QuantDot> paths = {cpu::QuantDot::avx2};
  if (__builtin_cpu_supports("avx512vnni")) paths.push_back(cpu::QuantDot::avx512_vnni);
  std::vector<float> want(size_t(M * q.rows));
  product(x.data(), M, q, want.data(), cpu::QuantDot::scalar);
  for (cpu::QuantDot dot : paths)
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      std::vector<float> got(want.size());
      product(x.data(), M, q, got.data(), dot);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << quant_format_name(q.format) << " " << cpu::quant_dot_name(dot) << " threads " << threads << " M=" << M
            << " at " << i;
    }
  set_num_threads(2);
  return want;
}

TEST(Quantized, EveryInstructionPathGivesTheScalarPathsBits) {
  std::printf("paths checked against scalar: avx2%s; in use here: %s\n",
              __builtin_cpu_supports("avx512vnni") ? ", avx512_vnni" : "", cpu::quant_dot_name(cpu::quant_dot_in_use()));
  for (const auto& [N, K, M] : {std::tuple{37, 45, 1}, std::tuple{64, 96, 3}, std::tuple{300, 200, 5}}) {
    const auto w = random_values(size_t(N * K), 2, 0.05f), x = random_values(size_t(M * K), 3, 3.0f);
    for (QuantFormat f : kFormats) every_path_gives_scalar_bits(quantize_matrix(w.data(), N, K, f, DType::f32), x, M);
  }
}

// A layer given int4 weights keeps them in groups; its export writes the rows in order.
TEST(Quantized, AnInt4LayerHoldsItsRowsInGroups) {
  Generator gen(7);
  nn::Linear layer(64, 20, gen, false);
  layer.quantize(QuantFormat::int4);
  ASSERT_TRUE(layer.quantized->grouped_rows);
  const QuantizedMatrix in_order = ungroup_rows(*layer.quantized);
  const Tensor x = Tensor::from_vector(random_values(64, 8), {1, 64});
  const Tensor y = layer.forward(x);
  std::vector<float> want(20);
  cpu::quantized_matmul_rows(x.data<float>(), 1, in_order, want.data(), cpu::quant_dot_in_use());
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(y.data<float>()[i], want[size_t(i)]) << i;
}

// A K-quant matrix of random blocks (every level and sub-block scale bit
// random), its f16 scales set to small finite values, as a GGUF file holds them.
QuantizedMatrix random_k_quant(QuantFormat f, int64_t rows, int64_t cols, uint32_t seed,
                               const std::function<void(uint8_t*)>& edit_block = {}) {
  std::mt19937 gen(seed);
  QuantizedMatrix q;
  q.format = f;
  q.rows = rows;
  q.cols = cols;
  const int64_t bytes = k_block_bytes(f), blocks = rows * cols / kSuperBlock;
  q.data = Tensor::empty({rows, cols / kSuperBlock * bytes}, DType::u8);
  uint8_t* data = q.data.data<uint8_t>();
  for (int64_t i = 0; i < blocks * bytes; ++i) data[i] = uint8_t(gen());
  std::normal_distribution<float> normal(0.0f, 0.002f);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t at : f == QuantFormat::q2_k   ? std::vector<int64_t>{80, 82}
                      : f == QuantFormat::q3_k ? std::vector<int64_t>{108}
                      : f == QuantFormat::q6_k ? std::vector<int64_t>{208}
                      : f == QuantFormat::iq4_xs ? std::vector<int64_t>{0}
                                               : std::vector<int64_t>{0, 2}) {
      const uint16_t h = float_to_f16(normal(gen));
      std::memcpy(data + b * bytes + at, &h, 2);
    }
  for (int64_t b = 0; edit_block && b < blocks; ++b) edit_block(data + b * bytes);
  return q;
}

// x's rows as the integer kernels of blocks of 32 and the prompt GEMM see
// them: each block's levels times its scale.
std::vector<float> rounded_per_block(const std::vector<float>& x, int64_t M, int64_t K) {
  std::vector<float> out(x.size());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k0 = 0; k0 < K; k0 += kQuantBlock) {
      const int64_t count = std::min(kQuantBlock, K - k0);
      int8_t q[kQuantBlock];
      float scale;
      cpu::quantize_activation_block(x.data() + m * K + k0, count, q, scale);
      for (int64_t j = 0; j < count; ++j) out[size_t(m * K + k0 + j)] = scale * float(q[j]);
    }
  return out;
}

// A block of activations to levels, whole (the AVX2 path) or partial (the
// scalar one), against llama.cpp's quantize_row_q8_0 written plainly: ties
// (values on half levels) round to even, zeros stay zero.
TEST(Quantized, ActivationBlocksRoundAsQ8_0) {
  std::vector<float> x = random_values(32 * 200, 41, 3.0f);
  for (int j = 0; j < 31; ++j) x[size_t(32 + j)] = float(j) - 15.5f;  // with 127 beside them (a scale of 1): ties
  x[63] = 127.0f;
  std::fill_n(x.begin() + 64, 32, 0.0f);
  for (int64_t count : {int64_t(32), int64_t(17)})
    for (size_t at = 0; at < x.size(); at += 32) {
      float amax = 0;
      for (int64_t j = 0; j < count; ++j) amax = std::max(amax, std::abs(x[at + size_t(j)]));
      const float exact = amax / 127.0f, inverse = exact > 0 ? 1.0f / exact : 0.0f;
      int8_t q[kQuantBlock];
      float scale;
      const int32_t sum = cpu::quantize_activation_block(x.data() + at, count, q, scale);
      int32_t want_sum = 0;
      for (int64_t j = 0; j < kQuantBlock; ++j) {
        const int want = j < count ? int(std::nearbyint(x[at + size_t(j)] * inverse)) : 0;
        want_sum += want;
        ASSERT_EQ(q[j], want) << "block " << at / 32 << " level " << j << " of " << count;
      }
      EXPECT_EQ(sum, want_sum);
      EXPECT_EQ(scale, f16_to_float(float_to_f16(exact)));
    }
}

// Row m of the rounded activations against dequantized row n, in f64: the
// product and the sum of its terms' magnitudes (what f32 rounding scales with).
std::pair<double, double> reference_dot(const std::vector<float>& rounded, const std::vector<float>& deq, int64_t m,
                                        int64_t n, int64_t K) {
  double exact = 0, magnitude = 0;
  for (int64_t k = 0; k < K; ++k) {
    const double term = double(rounded[size_t(m * K + k)]) * deq[size_t(n * K + k)];
    exact += term;
    magnitude += std::abs(term);
  }
  return {exact, magnitude};
}

// GGUF's K-quants (Q2_K to Q6_K) and IQ4_XS, kept as their blocks: every path gives
// the scalar path's bits at any thread count, and the product is the f32
// product of the dequantized weights with the activations as Q8_K rounds
// them (a prompt's GEMM: as blocks of 32 round them), up to the order of sums.
TEST(Quantized, KQuantProductsAreTheDequantizedWeightsOnEveryPath) {
  const int64_t N = 37, K = 512;
  for (QuantFormat f : kBlocksOf256) {
    const QuantizedMatrix q = random_k_quant(f, N, K, 11);
    EXPECT_EQ(q.bytes(), quantized_bytes(f, N, K));
    std::vector<float> deq(size_t(N * K));
    for (int64_t n = 0; n < N; ++n) dequantize_row(q, n, deq.data() + n * K);
    for (int64_t M : {int64_t(1), int64_t(3), kPromptRows + 1}) {
      const auto x = random_values(size_t(M * K), 12, 2.0f);
      const std::vector<float> want = every_path_gives_scalar_bits(q, x, M);
      std::vector<float> rounded(x.size());
      cpu::round_to_q8k_levels(x.data(), M, K, rounded.data());
      const bool prompt = M >= cpu::gemm_rows(cpu::quant_dot_in_use());
      if (prompt) rounded = rounded_per_block(x, M, K);  // (the prompt GEMM's rounding)
      const auto op = quantized_linear(Tensor::from_vector(x, {M, K}), q, Tensor()).to_vector<float>();
      double total = 0;
      for (float v : want) total += std::abs(v);
      EXPECT_GT(total, 1e-3 * double(want.size()));  // random blocks give products of substance
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          const auto [exact, magnitude] = reference_dot(rounded, deq, m, n, K);
          if (!prompt) {
            ASSERT_NEAR(want[size_t(m * N + n)], exact, 1e-5 * magnitude) << quant_format_name(f) << " M=" << M;
          }
          ASSERT_NEAR(op[size_t(m * N + n)], exact, 1e-5 * magnitude) << quant_format_name(f) << " op, M=" << M;
        }
    }
  }
  float out;
  EXPECT_THROW(quantize_matrix(&out, 1, 1, QuantFormat::q4_k, DType::f32), Error);  // read from GGUF, not made
}

// The op, decoding (integer kernel) and prompt-sized (widened weights, one
// SGEMM), against the f32 product of the dequantized weights: activations
// quantized per block of 32 cost at most half a level of the block's
// largest value each.
TEST(Quantized, ProductIsTheF32ProductOfTheSameWeightsWithinActivationRounding) {
  const int64_t N = 50, K = 70;
  const auto w = random_values(size_t(N * K), 4, 0.1f);
  const auto bias = random_values(size_t(N), 5);
  for (QuantFormat f : kFormats) {
    const QuantizedMatrix q = quantize_matrix(w.data(), N, K, f, DType::f32);
    std::vector<float> deq(size_t(N * K));
    for (int64_t n = 0; n < N; ++n) dequantize_row(q, n, deq.data() + n * K);
    for (int64_t M : {int64_t(1), int64_t(4), kPromptRows + 3}) {
      const auto x = random_values(size_t(M * K), 6);
      const Tensor y = quantized_linear(Tensor::from_vector(x, {M, K}), q, Tensor::from_vector(bias, {N}));
      ASSERT_EQ(y.shape(), (Shape{M, N}));
      const auto got = y.to_vector<float>();
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double exact = bias[size_t(n)], bound = 1e-4;
          for (int64_t k = 0; k < K; ++k) {
            exact += double(x[size_t(m * K + k)]) * deq[size_t(n * K + k)];
            bound += std::abs(deq[size_t(n * K + k)]) * 4.0 / 127.0;  // |x| < 4 here; half a level is max|x| / 254
          }
          ASSERT_NEAR(got[size_t(m * N + n)], exact, bound)
              << quant_format_name(f) << " M=" << M << " (" << m << ", " << n << ")";
        }
    }
  }
}

// GGUF's blocks of 32 as Kiln multiplies them (kiln/io/gguf_quants.h): random
// levels, f16 scales (and Q4_1's and Q5_1's minimums) small and finite.
QuantizedMatrix random_gguf_blocks(GgufType type, int64_t rows, int64_t cols, uint32_t seed,
                                   const std::function<void(uint8_t*)>& edit_block = {}) {
  const GgufTypeInfo& info = gguf_type_info(uint32_t(type));
  const bool with_min = type == GgufType::Q4_1 || type == GgufType::Q5_1;
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  Tensor blocks = Tensor::empty({rows, cols / 32 * info.block_bytes}, DType::u8);
  uint8_t* data = blocks.data<uint8_t>();
  for (int64_t i = 0; i < blocks.numel(); ++i) data[i] = uint8_t(gen());
  for (int64_t b = 0; b < rows * cols / 32; ++b)
    for (int at = 0; at < (with_min ? 4 : 2); at += 2) {
      const uint16_t h = float_to_f16(normal(gen));
      std::memcpy(data + b * info.block_bytes + at, &h, 2);
    }
  for (int64_t b = 0; edit_block && b < rows * cols / 32; ++b) edit_block(data + b * info.block_bytes);
  return gguf_to_quantized(type, blocks, rows, cols, DType::f32);
}

// Q4_1 and Q5_1 (levels with a minimum per block), beside Q8_0, Q4_0, Q5_0
// and IQ4_NL (looked-up levels), read from GGUF blocks: every path gives the scalar path's bits, the
// decoding and prompt-sized products are the f32 product of the dequantized
// weights within activation rounding, and the minimums are not dropped.
// `in_order` with its rows in groups reads as it: the same bytes, the same rows dequantized, its bytes back
// after ungrouping, and the decoding kernel's and the prompt GEMM's bits on every path. Returns the grouped matrix.
QuantizedMatrix expect_groups_read_as_rows_in_order(const QuantizedMatrix& in_order) {
  const int64_t N = in_order.rows, K = in_order.cols;
  const QuantizedMatrix grouped = group_rows(in_order);
  EXPECT_TRUE(grouped.grouped_rows);
  EXPECT_EQ(grouped.bytes(), in_order.bytes());
  std::vector<float> a(static_cast<size_t>(K)), b(static_cast<size_t>(K));
  for (int64_t r = 0; r < N; ++r) {
    dequantize_row(in_order, r, a.data());
    dequantize_row(grouped, r, b.data());
    EXPECT_EQ(a, b) << "row " << r;
  }
  const QuantizedMatrix back = ungroup_rows(grouped);
  EXPECT_FALSE(back.grouped_rows);
  EXPECT_EQ(std::memcmp(back.data.data_ptr(), in_order.data.data_ptr(), in_order.data.nbytes()), 0);
  if (in_order.scales.defined())
    EXPECT_EQ(std::memcmp(back.scales.data_ptr(), in_order.scales.data_ptr(), in_order.scales.nbytes()), 0);
  for (int64_t M : {int64_t(1), int64_t(3), kPromptRows}) {
    const auto x = random_values(size_t(M * K), 5, 3.0f);
    const Product product = M < kPromptRows ? cpu::quantized_matmul_rows : cpu::quantized_gemm;
    const std::vector<float> want = every_path_gives_scalar_bits(in_order, x, M, product);
    const std::vector<float> got = every_path_gives_scalar_bits(grouped, x, M, product);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "M=" << M << " at " << i;
  }
  return grouped;
}

// int4's, iq4_nl's and int8b's rows in groups of eight (what a model holds,
// kiln/core/quantized.h) read as the rows in order: the same rows
// dequantized, and the decoding kernel's and the prompt GEMM's bits on every
// path, for counts of blocks of every remainder by 4 (the paired kernel's
// chains) and rows past the last whole group.
TEST(Quantized, RowsInGroupsGiveTheBitsOfRowsInOrder) {
  for (const auto& [N, K] : {std::tuple{37, 32}, std::tuple{64, 64}, std::tuple{300, 96}, std::tuple{24, 128},
                             std::tuple{41, 160}, std::tuple{16, 224}})
    for (QuantFormat f : {QuantFormat::int4, QuantFormat::iq4_nl, QuantFormat::int8_block}) {
      const auto w = random_values(size_t(N * K), 4, 0.05f);
      const QuantizedMatrix in_order = f == QuantFormat::iq4_nl ? random_gguf_blocks(GgufType::IQ4_NL, N, K, 4)
                                                                : quantize_matrix(w.data(), N, K, f, DType::f32);
      SCOPED_TRACE(std::string(quant_format_name(in_order.format)) + " " + std::to_string(N) + " x " +
                   std::to_string(K));
      expect_groups_read_as_rows_in_order(in_order);
    }
  const auto w = random_values(64, 6);
  EXPECT_THROW(group_rows(quantize_matrix(w.data(), 2, 32, QuantFormat::int4_zero, DType::f32)), Error);
}

// The K-quants' rows in groups (blocks of 256 rearranged within the group,
// kiln/core/quantized_k.h) read as the rows in order too, for one to three blocks and rows past the last whole
// group; and a layer given q4_k weights holds them so.
TEST(Quantized, KQuantRowsInGroupsGiveTheBitsOfRowsInOrder) {
  for (QuantFormat f : {QuantFormat::q2_k, QuantFormat::q3_k, QuantFormat::q4_k, QuantFormat::q5_k, QuantFormat::q6_k,
                        QuantFormat::iq4_xs})
    for (const auto& [N, K] : {std::tuple{8, 256}, std::tuple{37, 512}, std::tuple{64, 768}, std::tuple{19, 256}}) {
      SCOPED_TRACE(std::string(quant_format_name(f)) + " " + std::to_string(N) + " x " + std::to_string(K));
      const QuantizedMatrix in_order = random_k_quant(f, N, K, uint32_t(N + K));
      const QuantizedMatrix grouped = expect_groups_read_as_rows_in_order(in_order);
      EXPECT_NE(std::memcmp(grouped.data.data_ptr(), in_order.data.data_ptr(), size_t(k_group_bytes(f))), 0);
    }
  // A layer given q4_k weights (a GGUF file's) keeps them in groups.
  Generator gen(7);
  nn::Linear layer(512, 20, gen, false);
  const QuantizedMatrix q = random_k_quant(QuantFormat::q4_k, 20, 512, 9);
  layer.set_quantized(std::make_shared<const QuantizedMatrix>(q));
  ASSERT_TRUE(layer.quantized->grouped_rows);
  const Tensor x = Tensor::from_vector(random_values(512, 8), {1, 512});
  const Tensor y = layer.forward(x);
  std::vector<float> want(20);
  cpu::quantized_matmul_rows(x.data<float>(), 1, q, want.data(), cpu::quant_dot_in_use());
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(y.data<float>()[i], want[size_t(i)]) << i;
}

TEST(Quantized, GgufBlocksOf32MultiplyAsTheirDequantizedWeights) {
  const int64_t N = 37;
  // 3 blocks: a pair and a lone block; 8: pairs only; 7: all three steps of the paired kernel.
  for (int64_t K : {96, 256, 224})
  for (GgufType type : kGgufBlocksOf32) {
    const QuantizedMatrix q = random_gguf_blocks(type, N, K, 21);
    SCOPED_TRACE(std::string(quant_format_name(q.format)) + " K=" + std::to_string(K));
    EXPECT_EQ(q.bytes(), quantized_bytes(q.format, N, K));
    std::vector<float> deq(size_t(N * K));
    for (int64_t n = 0; n < N; ++n) dequantize_row(q, n, deq.data() + n * K);
    for (int64_t M : {int64_t(1), int64_t(3), kPromptRows + 1}) {
      const auto x = random_values(size_t(M * K), 22, 1.0f);
      every_path_gives_scalar_bits(q, x, M);
      const auto got = quantized_linear(Tensor::from_vector(x, {M, K}), q, Tensor()).to_vector<float>();
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double exact = 0, bound = 1e-5;
          for (int64_t k = 0; k < K; ++k) {
            exact += double(x[size_t(m * K + k)]) * deq[size_t(n * K + k)];
            bound += std::abs(deq[size_t(n * K + k)]) * 5.0 / 254.0;  // |x| < 5 here; half a level is max|x| / 254
          }
          ASSERT_NEAR(got[size_t(m * N + n)], exact, bound) << "M=" << M << " (" << m << ", " << n << ")";
        }
    }
  }
  // A minimum alone (all levels 0) is what the product gives: min * sum(x).
  QuantizedMatrix q = random_gguf_blocks(GgufType::Q4_1, 1, 32, 23);
  std::fill_n(q.data.data<uint8_t>(), 16, uint8_t(0));
  const std::vector<float> ones(32, 1.0f);
  const auto got = quantized_linear(Tensor::from_vector(ones, {1, 32}), q, Tensor()).to_vector<float>();
  const double want = 32.0 * q.mins.data<float>()[0];
  EXPECT_NEAR(got[0], want, 1e-3 * std::abs(want));  // the activations' f16 scale rounds 1/127
  EXPECT_NE(q.mins.data<float>()[0], 0.0f);
}

// A prompt's product (the integer GEMM over groups of eight weight rows),
// every format: every path gives the scalar path's bits at 1 and 2
// threads, and the product is the f32 product of the dequantized weights
// with the activations rounded per block of 32, up to the order of sums.
// N = 19 leaves a partial group; M covers every tail of both paths' tiles.
TEST(Quantized, PromptGemmIsTheDequantizedProductOnEveryPath) {
  const int64_t N = 19;
  std::vector<QuantizedMatrix> matrices;
  const auto w = random_values(size_t(N * 100), 31, 0.1f);
  for (QuantFormat f : kFormats) matrices.push_back(quantize_matrix(w.data(), N, 100, f, DType::f32));  // a partial block
  for (GgufType type : kGgufBlocksOf32) matrices.push_back(random_gguf_blocks(type, N, 96, 32));
  for (QuantFormat f : kBlocksOf256) matrices.push_back(random_k_quant(f, N, 512, 33));
  for (const QuantizedMatrix& q : matrices) {
    const int64_t K = q.cols;
    SCOPED_TRACE(quant_format_name(q.format));
    std::vector<float> deq(size_t(N * K));
    for (int64_t n = 0; n < N; ++n) dequantize_row(q, n, deq.data() + n * K);
    for (int64_t M : {1, 5, 7, 13}) {
      const auto x = random_values(size_t(M * K), 34, 2.0f);
      const std::vector<float> want = every_path_gives_scalar_bits(q, x, M, cpu::quantized_gemm);
      const auto rounded = rounded_per_block(x, M, K);
      double total = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          const auto [exact, magnitude] = reference_dot(rounded, deq, m, n, K);
          total += std::abs(exact);
          ASSERT_NEAR(want[size_t(m * N + n)], exact, 1e-5 * magnitude + 1e-6) << "M=" << M << " (" << m << ", " << n << ")";
        }
      EXPECT_GT(total, 1e-3 * double(M * N));  // products of substance
    }
  }
}

// Every format's largest level in every weight (its level bytes all 0 or
// all 1 bits) against activations at their largest (127: 255 where a path
// takes them unsigned): the sums the AVX2 prompt GEMM adds in 16 bits
// before widening them (as many as the format's largest level allows) hold
// the extremes, and every path gives the scalar path's bits.
TEST(Quantized, PromptGemmHoldsEveryFormatsLargestLevels) {
  struct Extreme {
    GgufType type;
    int64_t first_byte, end_byte;  // where a block's levels are
    uint8_t fill;                  // the largest |level|: -8, 15, -16, 31, 3, -4, 15, 31, -32, -127, -127
  };
  const Extreme extremes[] = {{GgufType::Q4_0, 2, 18, 0x00},   {GgufType::Q4_1, 4, 20, 0xff},
                              {GgufType::Q5_0, 2, 22, 0x00},   {GgufType::Q5_1, 4, 24, 0xff},
                              {GgufType::Q2_K, 16, 80, 0xff},  {GgufType::Q3_K, 0, 96, 0x00},
                              {GgufType::Q4_K, 16, 144, 0xff}, {GgufType::Q5_K, 16, 176, 0xff},
                              {GgufType::Q6_K, 0, 192, 0x00},  {GgufType::IQ4_NL, 2, 18, 0x00},
                              {GgufType::IQ4_XS, 8, 136, 0x00}};
  const int64_t N = 11, K = 512, M = 5;
  const std::vector<float> x(size_t(M * K), 1.0f);
  for (const Extreme& e : extremes) {
    const auto fill = [&](uint8_t* block) { std::fill(block + e.first_byte, block + e.end_byte, e.fill); };
    const GgufTypeInfo& info = gguf_type_info(uint32_t(e.type));
    const QuantizedMatrix q = info.block_elements == 32 ? random_gguf_blocks(e.type, N, K, 51, fill)
                                                        : random_k_quant(*k_quant_format(e.type), N, K, 51, fill);
    SCOPED_TRACE(quant_format_name(q.format));
    std::vector<float> deq(size_t(N * K));
    for (int64_t n = 0; n < N; ++n) dequantize_row(q, n, deq.data() + n * K);
    const std::vector<float> got = every_path_gives_scalar_bits(q, x, M, cpu::quantized_gemm);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double exact = 0, magnitude = 0;
        for (int64_t k = 0; k < K; ++k) exact += deq[size_t(n * K + k)], magnitude += std::abs(deq[size_t(n * K + k)]);
        ASSERT_NEAR(got[size_t(m * N + n)], exact, 2e-3 * magnitude) << "(" << m << ", " << n << ")";  // 1 / 127's f16
      }
  }
}

// f16 weights (a GGUF file's F16 matrices, kept at 2 bytes): a few rows are
// few_rows_times_f32's bits on the widened weights (each row's sums the same
// whatever the other rows, in batch-invariant mode at any count), more rows
// the f32 product of the widened weights, also across several of the
// widened panels; lookups give the widened rows.
TEST(Quantized, HalfWeightsMultiplyAsTheirWidenedValues) {
  for (const auto& [N, K] : {std::pair<int64_t, int64_t>{37, 100}, {1100, 512}}) {
    SCOPED_TRACE(std::to_string(N) + " x " + std::to_string(K));
    const Tensor half = Tensor::from_vector(random_values(size_t(N * K), 41, 0.1f), {N, K}).to(DType::f16);
    const QuantizedMatrix q = half_matrix(half, DType::f32);
    EXPECT_EQ(q.bytes(), size_t(N * K * 2));
    EXPECT_EQ(quantized_bytes(QuantFormat::f16, N, K), q.bytes());
    const std::vector<float> wide = half.to(DType::f32).to_vector<float>();
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t n : {int64_t(0), N / 2, N - 1}) {
      dequantize_row(q, n, row.data());
      ASSERT_TRUE(std::equal(row.begin(), row.end(), wide.begin() + n * K)) << n;
    }
    const Tensor ids = Tensor::from_vector(std::vector<int64_t>{N - 1, 0, 3}, {3});
    EXPECT_EQ(quantized_embedding(q, ids).to_vector<float>(), embedding(half.to(DType::f32), ids).to_vector<float>());
    for (int64_t M : {1, 2, 5, 8, 9, 40}) {
      SCOPED_TRACE("M=" + std::to_string(M));
      const auto x = random_values(size_t(M * K), 42, 2.0f);
      const std::vector<float> got =
          quantized_linear(Tensor::from_vector(x, {M, K}), q, Tensor()).to_vector<float>();
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double exact = 0, magnitude = 0;
          for (int64_t k = 0; k < K; ++k) {
            exact += double(x[size_t(m * K + k)]) * wide[size_t(n * K + k)];
            magnitude += std::abs(double(x[size_t(m * K + k)]) * wide[size_t(n * K + k)]);
          }
          ASSERT_NEAR(got[size_t(m * N + n)], exact, 1e-5 * magnitude + 1e-6) << "(" << m << ", " << n << ")";
        }
      std::vector<float> few(size_t(M * N));
      cpu::few_rows_times_f32(M, N, K, 1.0f, x.data(), K, wide.data(), K, 0.0f, few.data(), N);
      if (M <= cpu::kFewRowsF16) {
        EXPECT_EQ(got, few);
      }
      set_batch_invariant(true);
      const std::vector<float> invariant =
          quantized_linear(Tensor::from_vector(x, {M, K}), q, Tensor()).to_vector<float>();
      set_batch_invariant(false);
      EXPECT_EQ(invariant, few);
    }
  }
  EXPECT_THROW(half_matrix(Tensor::from_vector(random_values(6, 1), {2, 3}), DType::f32), Error);  // not f16
}

// LoRA on a quantized base: the weights stay frozen, and the input's gradient
// is the incoming gradient times the dequantized matrix (more rows than one
// dequantized block, so the blocks add up).
TEST(Quantized, TheInputGradientGoesThroughTheDequantizedWeights) {
  const int64_t N = 300, K = 40, M = 5;
  const auto w = random_values(size_t(N * K), 7, 0.1f);
  const auto r = random_values(size_t(M * N), 10);
  for (QuantFormat f : kFormats) {
    const QuantizedMatrix q = quantize_matrix(w.data(), N, K, f, DType::f32);
    std::vector<float> deq(size_t(N * K));
    for (int64_t n = 0; n < N; ++n) dequantize_row(q, n, deq.data() + n * K);
    Tensor x = Tensor::from_vector(random_values(size_t(M * K), 8), {M, K});
    x.set_requires_grad(true);
    sum(mul(quantized_linear(x, q, Tensor()), Tensor::from_vector(r, {M, N}))).backward();
    const auto got = x.grad().to_vector<float>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        double exact = 0;
        for (int64_t n = 0; n < N; ++n) exact += double(r[size_t(m * N + n)]) * deq[size_t(n * K + k)];
        ASSERT_NEAR(got[size_t(m * K + k)], exact, 1e-4) << quant_format_name(f) << " (" << m << ", " << k << ")";
      }
  }
  const QuantizedMatrix q = quantize_matrix(w.data(), N, K, QuantFormat::int8, DType::f32);
  Tensor bias = Tensor::from_vector(random_values(size_t(N), 9), {N});
  bias.set_requires_grad(true);
  EXPECT_THROW(quantized_linear(Tensor::from_vector(random_values(size_t(K), 9), {1, K}), q, bias), Error);
  EXPECT_THROW(quantized_linear(Tensor::from_vector(random_values(31, 9), {1, 31}), q, Tensor()), Error);
}

// A loaded model quantized: its linears and embeddings hold quantized
// matrices (the f32 weights are gone), its log-probabilities stay near the
// f32 model's, and a cached decode gives what the whole prompt pass gives.
class QuantizedModels : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantizedModels, ScoreNearTheF32ModelAndDecodeAsTheyScore) {
  const auto want = hf_test::expected(GetParam());
  const auto ids = want["ids"].get<std::vector<int32_t>>();
  for (QuantFormat f : kFormats) {
    auto lm = models::load_hf_causal_lm(hf_test::fixture(GetParam()), DType::f32);
    const int64_t before = lm.model->parameter_count();
    const size_t bytes = nn::quantize_weights(*lm.model, f);
    EXPECT_LT(lm.model->parameter_count(), before / 20) << "only norms and biases stay f32";
    const std::vector<float> lp = models::next_token_log_probabilities(*lm.model, ids);
    const size_t V = lp.size() / ids.size();
    double mean = 0;
    for (size_t t = 1; t < ids.size(); ++t)
      mean += std::abs(lp[(t - 1) * V + size_t(ids[t])] - want["logprobs_f32"][t].get<double>()) / double(ids.size() - 1);
    // The fixtures' random weights, 0.25 wide, make every logit sensitive;
    // the quality bars proper are perplexities of a trained model (tests/cli/hf_quantized.sh).
    // A mixture's routers may send a token near a tie to another expert once the weights are rounded.
    const double int8_bar = std::string(GetParam()) == "mixtral" ? 0.25 : 0.1;
    EXPECT_LT(mean, f == QuantFormat::int8 ? int8_bar : 1.2) << GetParam() << " " << quant_format_name(f);
    std::printf("%s %s: mean log-probability change %.4f, %zu bytes quantized\n", GetParam(), quant_format_name(f),
                mean, bytes);
    // Decoding token by token through the cache gives the prompt pass's rows.
    NoGradGuard ng;
    models::KvCache cache = lm.model->new_cache();
    for (size_t t = 0; t + 1 < ids.size() && t < 12; ++t) {
      const Tensor logits = lm.model->forward_cached(Tensor::from_vector(std::vector<int64_t>{ids[t]}, {1, 1}), cache);
      const auto row = logits.to_vector<float>();
      float lse_max = *std::max_element(row.begin(), row.end());
      double sum = 0;
      for (float v : row) sum += std::exp(double(v) - lse_max);
      const double lp_t = row[size_t(ids[t + 1])] - lse_max - std::log(sum);
      // Equal up to the order of the sums, except where an activation sits on
      // a rounding boundary of its int8 level and the two passes' last bits
      // put it on either side: one level of one block (0.018 nats seen).
      EXPECT_NEAR(lp_t, lp[t * V + size_t(ids[t + 1])], 0.05) << GetParam() << " position " << t;
    }
  }
}

// (mixtral: a mixture of experts, whose experts quantize as every Linear does)
INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizedModels,
                         ::testing::Values("gpt2", "llama-gqa", "llama-mqa-tied", "qwen2", "mixtral"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace kiln
