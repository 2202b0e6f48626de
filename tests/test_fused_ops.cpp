// The fused ops that keep memory down: linear_cross_entropy (the GPT's loss
// head, which never holds the logits) and linear_of_gelu (selective
// checkpointing's MLP, which never holds GELU's output). Each against its
// unfused composition, and a gradient check in f64.
#include <cmath>
#include <functional>

#include "kiln/amp/autocast.h"
#include "kiln/backend/factory.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using namespace testing;

// 300 rows of 2 features into 3 classes: two chunks of rows (256 + 44).
Tensor many_targets(int64_t n, int64_t classes) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = i % 17 == 5 ? -100 : (i * 7) % classes;
  return Tensor::from_vector(t, {n});
}

TEST(FusedOps, LinearCrossEntropyGradchecksAcrossChunks) {
  Tensor x = random_tensor({300, 2}, 1), w = random_tensor({3, 2}, 2);
  Tensor targets = many_targets(300, 3);
  gradcheck([&](auto& in) { return linear_cross_entropy(in[0], in[1], targets); }, {x, w});
}

TEST(FusedOps, LinearCrossEntropyEqualsTheUnfusedPair) {
  Tensor x = to_dtype(random_tensor({2, 200, 8}, 3), DType::f32), w = to_dtype(random_tensor({5, 8}, 4), DType::f32);
  std::vector<int64_t> t(400);
  for (size_t i = 0; i < t.size(); ++i) t[i] = i % 9 == 0 ? -100 : int64_t(i % 5);
  Tensor targets = Tensor::from_vector(t, {2, 200});
  Tensor xa = x.clone().set_requires_grad(), wa = w.clone().set_requires_grad();
  Tensor xb = x.clone().set_requires_grad(), wb = w.clone().set_requires_grad();
  Tensor fused = linear_cross_entropy(xa, wa, targets);
  Tensor plain = cross_entropy(linear(xb, wb, Tensor()), targets);
  EXPECT_NEAR(fused.item(), plain.item(), 1e-6);
  mul_scalar(fused, 3.0).backward();  // backward scales by the incoming gradient
  mul_scalar(plain, 3.0).backward();
  EXPECT_LT(max_abs_diff(xa.grad(), xb.grad()), 1e-6);
  EXPECT_LT(max_abs_diff(wa.grad(), wb.grad()), 1e-6);
  EXPECT_THROW(linear_cross_entropy(x, w, targets.slice(1, 0, 100)), Error);
  EXPECT_THROW(linear_cross_entropy(x, transpose(w, 0, 1), targets), Error);
}

// Under bf16 autocast, where the backend multiplies bf16 into f32 faster, the
// head's three products take bf16 operands: the loss and the gradients stay
// f32 and within bf16 rounding of the f32 op on the same rounded inputs.
TEST(FusedOps, LinearCrossEntropyUnderBf16AutocastMultipliesInBf16) {
  if (!backend_for(Device::cpu()).fast_bf16_to_f32_matmul()) GTEST_SKIP() << "no faster bf16 product on this CPU";
  auto rounded = [](const Shape& shape, uint64_t seed) {
    return to_dtype(to_dtype(random_tensor(shape, seed), DType::bf16), DType::f32);
  };
  auto max_abs = [](const Tensor& t) { return max_abs_diff(t, zeros_like(t)); };
  Tensor x = rounded({300, 64}, 11), w = rounded({50, 64}, 12);
  Tensor targets = many_targets(300, 50);
  Tensor xa = x.clone().set_requires_grad(), wa = w.clone().set_requires_grad();
  Tensor xb = x.clone().set_requires_grad(), wb = w.clone().set_requires_grad();
  Tensor low;
  {
    amp::AutocastGuard bf16(DType::bf16);
    low = linear_cross_entropy(xa, wa, targets);
  }
  Tensor ref = linear_cross_entropy(xb, wb, targets);
  EXPECT_EQ(low.dtype(), DType::f32);
  EXPECT_NEAR(low.item(), ref.item(), 1e-5 * std::abs(ref.item()));  // exact products, other summation order
  low.backward();
  ref.backward();
  EXPECT_EQ(xa.grad().dtype(), DType::f32);
  // The logits' gradient is rounded to bf16 (8 bits) before the two
  // gradient products.
  EXPECT_LT(max_abs_diff(xa.grad(), xb.grad()), 1e-2 * max_abs(xb.grad()));
  EXPECT_LT(max_abs_diff(wa.grad(), wb.grad()), 1e-2 * max_abs(wb.grad()));
  EXPECT_GT(max_abs_diff(xa.grad(), xb.grad()), 0.0) << "the bf16 products were not used";
}

TEST(FusedOps, LinearOfGeluGradchecks) {
  for (bool keep : {false, true}) {  // fresh leaves each time: gradients would accumulate
    Tensor h = random_tensor({9, 4}, 5), w = random_tensor({3, 4}, 6), b = random_tensor({3}, 7);
    gradcheck([keep](auto& in) { return linear_of_gelu(in[0], in[1], in[2], keep); }, {h, w, b});
  }
}

struct GeluLinearRun {
  std::vector<float> y, dh, dw, db;
};

GeluLinearRun run_gelu_linear(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f) {
  Tensor h = to_dtype(random_tensor({4, 300, 64}, 8, DType::f64, -3, 3), DType::f32).set_requires_grad();
  Tensor w = to_dtype(random_tensor({32, 64}, 9), DType::f32).set_requires_grad();
  Tensor b = to_dtype(random_tensor({32}, 10), DType::f32).set_requires_grad();
  Tensor y = f(h, w, b);
  sum(mul(y, to_dtype(random_tensor(y.shape(), 11), DType::f32))).backward();
  return {y.to_vector<float>(), h.grad().to_vector<float>(), w.grad().to_vector<float>(), b.grad().to_vector<float>()};
}

// Recomputing gelu(h) gives the bits of keeping it: what lets selective
// checkpointing promise the plain run's gradients. Both are the unfused
// pair up to the BLAS's rounding of row chunks.
TEST(FusedOps, LinearOfGeluRecomputedIsBitwiseKept) {
  GeluLinearRun recomputed = run_gelu_linear([](auto& h, auto& w, auto& b) { return linear_of_gelu(h, w, b, false); });
  GeluLinearRun kept = run_gelu_linear([](auto& h, auto& w, auto& b) { return linear_of_gelu(h, w, b, true); });
  GeluLinearRun pair = run_gelu_linear([](auto& h, auto& w, auto& b) { return linear(gelu(h), w, b); });
  EXPECT_EQ(recomputed.y, kept.y);
  EXPECT_EQ(recomputed.dh, kept.dh);
  EXPECT_EQ(recomputed.dw, kept.dw);
  EXPECT_EQ(recomputed.db, kept.db);
  for (size_t i = 0; i < pair.y.size(); ++i) ASSERT_NEAR(kept.y[i], pair.y[i], 1e-5 * (1 + std::abs(pair.y[i])));
  for (size_t i = 0; i < pair.dw.size(); ++i) ASSERT_NEAR(kept.dw[i], pair.dw[i], 1e-3 * (1 + std::abs(pair.dw[i])));
}

// A linear layer's bias gradient comes with its weight's, from one backend
// call (matmul_and_row_sums: on the GPU, the GEMM's epilogue). The CPU's
// default multiplies, then sums dY's columns as sum(dY, {0}) does: the same
// bits, for a plain and a transposed a.
TEST(FusedOps, MatmulAndRowSumsIsTheProductAndTheColumnSums) {
  Backend& cpu = backend_for(Device::cpu());
  for (DType t : {DType::f32, DType::f64}) {
    Tensor dy = to_dtype(random_tensor({300, 24}, 12, DType::f64, -2, 2), t);
    Tensor x = to_dtype(random_tensor({300, 40}, 13, DType::f64, -2, 2), t);
    Tensor dw = Tensor::empty({24, 40}, t, Device::cpu()), db = Tensor::empty({24}, t, Device::cpu());
    cpu.matmul_and_row_sums(transpose(dy, 0, 1), x, dw, db);
    EXPECT_EQ(dw.to_vector<double>(), matmul(transpose(dy, 0, 1), x).to_vector<double>()) << dtype_name(t);
    EXPECT_EQ(db.to_vector<double>(), sum(dy, {0}).to_vector<double>()) << dtype_name(t);

    Tensor a = contiguous(transpose(dy, 0, 1)), sums = Tensor::empty({24}, t, Device::cpu());
    cpu.matmul_and_row_sums(a, x, dw, sums);
    EXPECT_EQ(sums.to_vector<double>(), sum(a, {1}).to_vector<double>()) << dtype_name(t);
  }
  Tensor a = random_tensor({3, 4}, 14), b = random_tensor({4, 2}, 15);
  Tensor out = Tensor::empty({3, 2}, DType::f64, Device::cpu()), wrong = Tensor::empty({4}, DType::f64, Device::cpu());
  EXPECT_THROW(cpu.matmul_and_row_sums(a, b, out, wrong), Error);
}

}  // namespace
}  // namespace kiln
