// Decoding's bf16, f16 and f32 products (kiln/cpu/few_rows_product.h): every
// output is its plain C++ statement's bits, whatever the rows around it and
// the thread count; through matmul and linear, bf16 and f16 products of a
// few rows (and of many, widened as packed_gemm packs them) agree with the widened
// f32 product as closely as the staged path does.
// (Named CpuNnOps* so the ISA passes run them under each instruction set.)
#include <gtest/gtest.h>

#include <cmath>
#include <utility>

#include "kiln/autograd/ops.h"
#include "kiln/backend/factory.h"
#include "kiln/cpu/few_rows_product.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

std::vector<float> random_floats(size_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(n);
  for (float& x : v) x = float(g.uniform() * 2 - 1);
  return v;
}

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  const std::vector<float> f = random_floats(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] = float_to_bf16(f[i]);
  return v;
}

struct Half {  // f16's bits, told apart from bf16's
  uint16_t bits;
};
std::vector<Half> random_f16(size_t n, uint64_t seed) {
  std::vector<Half> v(n);
  const std::vector<float> f = random_floats(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] = {float_to_f16(f[i])};
  return v;
}

// The header's statement: 32 lanes, lane t summing k = t mod 32 in k order
// with fused multiply-adds, then lanes t and t + 16, t + 8, t + 4, t + 2, t + 1.
float weight(uint16_t w) { return bf16_to_float(w); }
float weight(Half w) { return f16_to_float(w.bits); }
float weight(float w) { return w; }
template <typename W>
float lane_order_dot(const float* a, const W* w, int64_t K) {
  float lanes[32] = {};
  for (int64_t k = 0; k < K; ++k) lanes[k % 32] = std::fma(a[k], weight(w[k]), lanes[k % 32]);
  for (int width = 16; width >= 1; width /= 2)
    for (int t = 0; t < width; ++t) lanes[t] += lanes[t + width];
  return lanes[0];
}

TEST(CpuNnOpsFewRows, EveryOutputIsTheLaneOrderDotForEveryShapeAndTail) {
  for (int64_t K : {1, 7, 31, 32, 33, 64, 100, 576})
    for (int64_t M : {1, 2, 3, 8}) {
      const int64_t N = 37, lda = K + 3, ldw = K + 5, ldc = N + 2;
      const auto a = random_floats(size_t(M * lda), 1 + K), c0 = random_floats(size_t(M * ldc), 3 + K);
      const auto w = random_bf16(size_t(N * ldw), 2 + K);
      const auto h = random_f16(size_t(N * ldw), 2 + K);
      for (float beta : {0.0f, 1.0f}) {
        std::vector<float> c = c0, c16 = c0;
        cpu::few_rows_times_bf16(M, N, K, 0.5f, a.data(), lda, w.data(), ldw, beta, c.data(), ldc);
        cpu::few_rows_times_f16(M, N, K, 0.5f, a.data(), lda, &h[0].bits, ldw, beta, c16.data(), ldc);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            const float before = beta * c0[size_t(m * ldc + n)];
            const float dot = lane_order_dot(a.data() + m * lda, w.data() + n * ldw, K);
            ASSERT_EQ(c[size_t(m * ldc + n)], beta == 0.0f ? 0.5f * dot : 0.5f * dot + before)
                << "bf16: K " << K << " M " << M << " beta " << beta << " at " << m << "," << n;
            const float dot16 = lane_order_dot(a.data() + m * lda, h.data() + n * ldw, K);
            ASSERT_EQ(c16[size_t(m * ldc + n)], beta == 0.0f ? 0.5f * dot16 : 0.5f * dot16 + before)
                << "f16: K " << K << " M " << M << " beta " << beta << " at " << m << "," << n;
          }
      }
    }
}

// f32 weights (one or two decoding rows of an f32 model): the same order,
// directly and through matmul with a weight's transpose (three rows take
// the GEMM: within f32 rounding).
TEST(CpuNnOpsFewRows, F32WeightsTakeTheSameLaneOrderDirectlyAndThroughMatmul) {
  for (int64_t K : {1, 31, 33, 576})
    for (int64_t M : {1, 2, 3}) {
      const int64_t N = 300, lda = K + 1, ldw = K + 3;
      const auto a = random_floats(size_t(M * lda), 11 + K), w = random_floats(size_t(N * ldw), 12 + K);
      std::vector<float> c(size_t(M * N));
      cpu::few_rows_times_f32(M, N, K, 1.0f, a.data(), lda, w.data(), ldw, 0.0f, c.data(), N);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n)
          ASSERT_EQ(c[size_t(m * N + n)], lane_order_dot(a.data() + m * lda, w.data() + n * ldw, K))
              << "K " << K << " M " << M << " at " << m << "," << n;
      const Tensor x = testing::random_tensor({M, K}, 13 + K, DType::f32);
      const Tensor weights = testing::random_tensor({N, K}, 14 + K, DType::f32);
      const std::vector<float> xs = x.to_vector<float>(), ws = weights.to_vector<float>();
      const std::vector<float> got = matmul(x, transpose(weights, 0, 1)).to_vector<float>();
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          const float dot = lane_order_dot(xs.data() + m * K, ws.data() + n * K, K);
          if (M <= cpu::kFewRowsF32)
            ASSERT_EQ(got[size_t(m * N + n)], dot) << "K " << K << " M " << M;
          else
            ASSERT_NEAR(got[size_t(m * N + n)], dot, 1e-4 * std::sqrt(double(K))) << "K " << K << " M " << M;
        }
    }
}

TEST(CpuNnOpsFewRows, ARowHasTheSameBitsAloneInABatchAndAtAnyThreadCount) {
  const int64_t M = 7, N = 1000, K = 300;  // large enough to run on every thread
  const auto a = random_floats(size_t(M * K), 4);
  const auto w = random_bf16(size_t(N * K), 5);
  std::vector<float> all(static_cast<size_t>(M * N)), one(static_cast<size_t>(N));
  cpu::few_rows_times_bf16(M, N, K, 1.0f, a.data(), K, w.data(), K, 0.0f, all.data(), N);
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int64_t m : {0, 3, 6}) {
      cpu::few_rows_times_bf16(1, N, K, 1.0f, a.data() + m * K, K, w.data(), K, 0.0f, one.data(), N);
      EXPECT_EQ(one, std::vector<float>(all.begin() + m * N, all.begin() + (m + 1) * N))
          << "row " << m << ", " << threads << " threads";
    }
  }
  set_num_threads(saved);
}

// x [.., M, K] bf16 or f16 through matmul with a weight's transpose, and
// through linear with a bias: within the dtype's rounding of the f32 product
// of the same values, for row counts on both sides of the few-rows threshold.
TEST(CpuNnOpsFewRows, DecodingProductsAgreeWithTheWidenedProduct) {
  const int64_t K = 97, N = 45;
  // Half an ulp of results up to |10|: bf16 keeps 8 bits (2^-5), f16 11 (2^-8).
  for (const auto& [dtype, rounding] : {std::pair{DType::bf16, 0.032}, {DType::f16, 0.004}}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor w = testing::random_tensor({N, K}, 6, dtype);
    const Tensor bias = testing::random_tensor({N}, 7, dtype);
    for (int64_t M : {int64_t(1), int64_t(2), int64_t(5), cpu::kFewRowsBf16, cpu::kFewRowsBf16 + 1}) {
      const Tensor x = testing::random_tensor({2, M, K}, 8 + uint64_t(M), dtype);
      const Tensor x32 = to_dtype(x, DType::f32), w32 = to_dtype(w, DType::f32);
      const Tensor reference = matmul(x32, transpose(w32, 0, 1));
      const Tensor product = matmul(x, transpose(w, 0, 1));
      ASSERT_EQ(product.dtype(), dtype);
      EXPECT_LT(testing::max_abs_diff(product, reference), rounding) << M << " rows";
      const Tensor with_bias = linear(x, w, bias);
      EXPECT_LT(testing::max_abs_diff(with_bias, reference + to_dtype(bias, DType::f32)), rounding) << M << " rows";
      // Each row of a batch is that row's own product.
      const Tensor first_row = matmul(slice(x, 1, 0, 1), transpose(w, 0, 1));
      EXPECT_EQ(testing::max_abs_diff(first_row, slice(product, 1, 0, 1)), 0.0) << M << " rows";
    }
  }
}

// Beyond a few rows, on a CPU without fast bf16 products, a bf16 or f16
// weight is widened as it is packed (kiln/cpu/packed_gemm.h): several
// 192-column tasks and a short last one, the weight transposed (a Linear's)
// or not, with a bias, agree with the product of the widened operands.
TEST(CpuNnOpsFewRows, ManyRowsAgreeWithTheWidenedProduct) {
  const int64_t M = 40, K = 600, N = 2100;  // ten tasks of 192 columns and one of 180
  // Rounded once (bf16: 8 significant bits, f16: 11): within half a step, at
  // most 2^-8 (2^-11) of each value. The f32 sums before it run in
  // packed_gemm's order, the reference's in oneDNN's: a few f32 roundings of
  // a sum apart (3e-6 seen), hence 1e-5 more.
  for (const auto& [dtype, step] : {std::pair{DType::bf16, 1.0 / 256}, {DType::f16, 1.0 / 2048}}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = testing::random_tensor({M, K}, 30, dtype);
    const Tensor w = testing::random_tensor({N, K}, 31, dtype), bias = testing::random_tensor({N}, 32, dtype);
    const Tensor x32 = to_dtype(x, DType::f32), w32 = to_dtype(w, DType::f32);
    const Tensor reference = matmul(x32, transpose(w32, 0, 1));
    auto within_rounding = [](const Tensor& got, const Tensor& want) {
      const std::vector<float> g = to_dtype(got, DType::f32).to_vector<float>(), w = want.to_vector<float>();
      double worst = 0;
      for (size_t i = 0; i < g.size(); ++i)
        worst = std::max(worst, std::abs(double(g[i]) - w[i]) / std::max(1.0, std::abs(double(w[i]))));
      return worst;
    };
    EXPECT_LT(within_rounding(matmul(x, transpose(w, 0, 1)), reference), step + 1e-5);
    EXPECT_LT(within_rounding(linear(x, w, bias), reference + to_dtype(bias, DType::f32)), step + 1e-5);
    const Tensor w_columns = contiguous(transpose(w, 0, 1));  // [K, N], rows contiguous
    EXPECT_LT(within_rounding(matmul(x, w_columns), reference), step + 1e-5);
  }
}

// A bf16 table gathers its rows as they are (no f32 copy of the table).
TEST(CpuNnOpsFewRows, Bf16EmbeddingGathersTheStoredRows) {
  const Tensor table = testing::random_tensor({50, 24}, 9, DType::bf16);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 49, 0, 3}, {2, 2});
  const Tensor rows = embedding(table, ids);
  ASSERT_EQ(rows.dtype(), DType::bf16);
  const auto all = table.to_vector<float>(), got = rows.to_vector<float>();
  const int64_t picked[] = {3, 49, 0, 3};
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t c = 0; c < 24; ++c) ASSERT_EQ(got[size_t(i * 24 + c)], all[size_t(picked[i] * 24 + c)]);
}

}  // namespace
}  // namespace kiln
