// The GEMM with b widened as it is packed (kiln/cpu/packed_gemm.h): every
// edge of its blocking against a double-precision product of the same
// values, and the same bits at any thread count.
// (Named CpuNnOps* so the ISA passes run them under each instruction set:
// its 4 x 24 AVX2 tile, and its 8 x 48 AVX-512 one where the CPU has it.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/core/dtype.h"
#include "kiln/core/random.h"
#include "kiln/cpu/packed_gemm.h"

namespace kiln {
namespace {

using cpu::PackedSource;

// b's elements in its storage type, and the f32 values they stand for.
struct Operand {
  std::vector<float> f32, values;
  std::vector<uint16_t> bits;
  const void* data(PackedSource type) const {
    return type == PackedSource::f32 ? static_cast<const void*>(f32.data()) : bits.data();
  }
};

Operand random_operand(size_t n, PackedSource type, uint64_t seed) {
  Generator g(seed);
  Operand o;
  for (size_t i = 0; i < n; ++i) {
    const float x = float(g.uniform() * 2 - 1);
    const uint16_t h = type == PackedSource::f16 ? float_to_f16(x) : float_to_bf16(x);
    o.f32.push_back(x);
    o.bits.push_back(h);
    o.values.push_back(type == PackedSource::f32 ? x : type == PackedSource::f16 ? f16_to_float(h) : bf16_to_float(h));
  }
  return o;
}

struct Shape {
  int64_t M, N, K;
  bool b_transposed;
  int64_t pad;  // extra elements at the end of each row of a, b and c
};

// c = alpha * a · b + beta * c, in double, from the values b stands for.
std::vector<double> reference(const Shape& s, float alpha, const std::vector<float>& a, const std::vector<float>& b,
                              float beta, const std::vector<float>& c) {
  const int64_t lda = s.K + s.pad, ldb = (s.b_transposed ? s.K : s.N) + s.pad, ldc = s.N + s.pad;
  std::vector<double> out(size_t(s.M * s.N));
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t j = 0; j < s.N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < s.K; ++k)
        sum += double(a[size_t(i * lda + k)]) * b[size_t(s.b_transposed ? j * ldb + k : k * ldb + j)];
      out[size_t(i * s.N + j)] = alpha * sum + (beta == 0.0f ? 0.0 : beta * double(c[size_t(i * ldc + j)]));
    }
  return out;
}

// Every edge of the blocking: rows not a multiple of the 4- or 8-row tile,
// columns not a multiple of the 24- or 48-column tile or the 192-column task
// (or narrower than one tile), depths over
// one 256-deep block with a short last one, padded rows, few columns (the
// rows are split among the threads too), and a depth so large that a is
// packed a block of rows at a time.
TEST(CpuNnOpsPackedGemm, AgreesWithTheProductInDoubleAtEveryEdgeOfItsBlocking) {
  const Shape shapes[] = {{37, 53, 300, true, 0},  {37, 53, 300, false, 0}, {5, 200, 17, true, 3},
                          {150, 7, 520, false, 5}, {1, 1, 1, true, 0},      {64, 5, 70001, true, 0},
                          {300, 24, 96, false, 0}};
  for (PackedSource type : {PackedSource::f32, PackedSource::bf16, PackedSource::f16})
    for (const Shape& s : shapes)
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.5f, 2.0f}}) {
        SCOPED_TRACE(testing::Message() << "type " << int(type) << ", " << s.M << "x" << s.N << "x" << s.K
                                        << (s.b_transposed ? " (b transposed)" : "") << ", pad " << s.pad << ", beta "
                                        << beta);
        const int64_t lda = s.K + s.pad, ldb = (s.b_transposed ? s.K : s.N) + s.pad, ldc = s.N + s.pad;
        const Operand a = random_operand(size_t(s.M * lda), PackedSource::f32, 1);
        const Operand b = random_operand(size_t((s.b_transposed ? s.N : s.K) * ldb), type, 2);
        std::vector<float> c = random_operand(size_t(s.M * ldc), PackedSource::f32, 3).f32;
        if (beta == 0.0f)  // beta 0: c is written, never read
          for (float& x : c) x = std::numeric_limits<float>::quiet_NaN();
        const std::vector<double> want = reference(s, alpha, a.f32, b.values, beta, c);
        const std::vector<float> before = c;
        cpu::packed_gemm(s.M, s.N, s.K, alpha, a.f32.data(), lda, b.data(type), type, s.b_transposed, ldb, beta,
                         c.data(), ldc);
        // f32 sums of K products of values within 1, against double: a wrong
        // or missed product would be off by far more.
        const double bound = 2e-7 * double(s.K) + 1e-6;
        for (int64_t i = 0; i < s.M; ++i) {
          for (int64_t j = 0; j < s.N; ++j)
            ASSERT_NEAR(c[size_t(i * ldc + j)], want[size_t(i * s.N + j)], bound) << "at " << i << "," << j;
          for (int64_t j = s.N; j < ldc; ++j)  // the padding is not written
            ASSERT_TRUE(std::isnan(before[size_t(i * ldc + j)])
                            ? std::isnan(c[size_t(i * ldc + j)])
                            : c[size_t(i * ldc + j)] == before[size_t(i * ldc + j)]);
        }
      }
}

TEST(CpuNnOpsPackedGemm, EmptySumsScaleC) {
  std::vector<float> c = {1, 2, 3, 4, 5, 6};
  cpu::packed_gemm(2, 3, 0, 1.0f, nullptr, 0, nullptr, PackedSource::f16, true, 0, 0.5f, c.data(), 3);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3}));
}

// Threads take tasks as they come free, and at 2 threads 500 columns are
// four narrower tasks, not three of 192; yet each output's sum runs in one
// fixed order: the same bits at one, two and three threads.
TEST(CpuNnOpsPackedGemm, TheSameBitsAtAnyThreadCount) {
  const int64_t M = 70, N = 500, K = 600;
  const Operand a = random_operand(size_t(M * K), PackedSource::f32, 4);
  const Operand b = random_operand(size_t(N * K), PackedSource::f16, 5);
  const int saved = get_num_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<float> c(size_t(M * N));
    cpu::packed_gemm(M, N, K, 1.0f, a.f32.data(), K, b.data(PackedSource::f16), PackedSource::f16, true, K, 0.0f,
                     c.data(), N);
    results.push_back(c);
  }
  set_num_threads(saved);
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

}  // namespace
}  // namespace kiln
