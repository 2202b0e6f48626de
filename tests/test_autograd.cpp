// The autograd engine: accumulation, no_grad, and clear errors.
#include "op_test_util.h"

namespace kiln {
namespace {

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor w = Tensor::from_vector<float>({1, 2, 3}, {3}).set_requires_grad();
  for (int i = 0; i < 2; ++i) sum(mul(w, w)).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{4, 8, 12}));
  w.zero_grad();
  sum(w).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

TEST(Autograd, SharedSubexpressionSumsBothPaths) {
  Tensor x = Tensor::from_vector<double>({2.0}, {1}).set_requires_grad();
  Tensor y = mul(x, x);         // y = x^2
  Tensor z = add(y, mul(y, x));  // z = x^2 + x^3 -> dz/dx = 2x + 3x^2 = 16
  z.backward(ones({1}, DType::f64));
  EXPECT_DOUBLE_EQ(x.grad().item(), 16.0);
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor w = Tensor::from_vector<float>({1, 2}, {2}).set_requires_grad();
  Tensor y;
  {
    NoGradGuard ng;
    y = mul(w, w);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(sum(y).backward(), Error);
}

TEST(Autograd, SecondBackwardOnFreedGraphIsAClearError) {
  Tensor w = Tensor::from_vector<float>({1, 2}, {2}).set_requires_grad();
  Tensor loss = sum(exp(w));
  loss.backward();
  try {
    loss.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
  Tensor loss2 = sum(exp(w));
  loss2.backward(Tensor(), true);
  EXPECT_NO_THROW(loss2.backward());
}

TEST(Autograd, ShapeMismatchesAreClearErrors) {
  Tensor w = Tensor::from_vector<float>({1, 2, 3}, {3}).set_requires_grad();
  Tensor y = mul(w, w);
  EXPECT_THROW(y.backward(), Error);                // non-scalar without a gradient
  EXPECT_THROW(y.backward(ones({2})), Error);       // wrong gradient shape
  EXPECT_THROW(add(w, ones({2})), Error);           // incompatible broadcast
  EXPECT_THROW(matmul(ones({2, 3}), ones({2, 3})), Error);
  EXPECT_THROW(add(w, ones({3}, DType::i64)), Error);  // float with integer
}

TEST(Autograd, DetachAndLeafFlags) {
  Tensor w = Tensor::from_vector<float>({1, 2}, {2}).set_requires_grad();
  Tensor y = mul(w, w);
  EXPECT_TRUE(w.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.same_storage(y));
}

TEST(Tensor, ViewsShareStorage) {
  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = x.transpose(0, 1);
  EXPECT_TRUE(t.same_storage(x));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.contiguous().to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor s = x.slice(1, 1, 3);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_THROW(t.view({6}), Error);  // a non-contiguous view cannot be viewed flat
  EXPECT_EQ(t.reshape({6}).to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Tensor, AllocatorCountsExactBytes) {
  MemoryStats before = allocator_for(Device::cpu()).stats();
  {
    Tensor a = Tensor::empty({1000}, DType::f32);
    MemoryStats during = allocator_for(Device::cpu()).stats();
    EXPECT_EQ(during.current - before.current, 4000u);
  }
  EXPECT_EQ(allocator_for(Device::cpu()).stats().current, before.current);
}

TEST(Tensor, CudaDeviceWithoutGpuIsAClearError) {
  if (cuda_is_available()) GTEST_SKIP() << "a GPU is present";
  try {
    Tensor::empty({2}).to(Device::cuda(0));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A grad-ready hook runs once per backward, after the leaf has every
// gradient that backward sends it (a leaf used twice sees the sum), in the
// order backward finishes the leaves: the last layer's first.
TEST(Autograd, GradReadyHooksRunOnceThePerLeafSumIsComplete) {
  Tensor first = Tensor::from_vector<float>({2.f}, {1}).set_requires_grad();
  Tensor second = Tensor::from_vector<float>({3.f}, {1}).set_requires_grad();
  Tensor unused = Tensor::from_vector<float>({1.f}, {1}).set_requires_grad();
  std::vector<std::pair<std::string, float>> seen;
  const int64_t a = first.add_grad_ready_hook([&](const Tensor& leaf) {
    seen.emplace_back("first", leaf.grad().to_vector<float>()[0]);
  });
  second.add_grad_ready_hook([&](const Tensor& leaf) { seen.emplace_back("second", leaf.grad().to_vector<float>()[0]); });
  unused.add_grad_ready_hook([&](const Tensor&) { seen.emplace_back("unused", 0.f); });
  // y = second * (first * first + first): dy/dfirst = second * (2 first + 1) = 15, dy/dsecond = 6.
  Tensor h = add(mul(first, first), first);
  sum(mul(second, h)).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::pair<std::string, float>{"second", 6.f}));
  EXPECT_EQ(seen[1], (std::pair<std::string, float>{"first", 15.f}));
  // A second backward accumulates (6 + 6) and runs the hooks again; a removed hook does not run.
  first.remove_grad_ready_hook(a);
  sum(mul(second, add(mul(first, first), first))).backward();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2], (std::pair<std::string, float>{"second", 12.f}));
  EXPECT_THROW(h.add_grad_ready_hook([](const Tensor&) {}), Error) << "only leaves take grad-ready hooks";
}

}  // namespace
}  // namespace kiln
