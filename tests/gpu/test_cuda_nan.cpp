// CUDA vs CPU with NaN and +-inf in the inputs: the kernels must put NaN and
// infinities exactly where the CPU reference does (which tests/
// test_nan_propagation.cpp checks against PyTorch). CUDA's fmaxf/max ignore
// a NaN operand, so every max in a kernel has to be written for it.
#include "tests/gpu/cuda_test_util.h"

namespace kiln::cuda_test {
namespace {

const double kNan = std::nan(""), kInf = INFINITY;

Tensor host_values_f32(const std::vector<double>& v, const Shape& shape) { return host_from_values(v, shape, DType::f32); }

// Same NaN positions and infinities; finite values within f32 tolerance.
void expect_same_specials(const Tensor& got_dev, const Tensor& want_host, const std::string& what) {
  expect_close(got_dev, want_host, tol_for(DType::f32), what);
}

TEST(CudaNan, ElementwiseAndReductions) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor x = host_values_f32({kNan, -1.5, 2.0, -kInf, kInf, 0.5}, {6});
  Tensor y = host_values_f32({0.0, kNan, 2.0, kInf, 1.0, -kInf}, {6});
  for (UnaryOp op : {UnaryOp::relu, UnaryOp::gelu, UnaryOp::tanh, UnaryOp::sigmoid, UnaryOp::exp}) {
    Tensor want = cpu_empty({6}, DType::f32), got = gpu_poisoned({6}, DType::f32);
    cpu().unary(op, x, want, 0);
    gpu().unary(op, to_gpu(x), got, 0);
    expect_same_specials(got, want, "unary " + std::to_string(int(op)));
    EXPECT_TRUE(std::isnan(host_values(to_host(got))[0])) << "unary " << int(op) << " of NaN must be NaN";
  }
  for (BinaryOp op : {BinaryOp::maximum, BinaryOp::minimum, BinaryOp::relu_backward, BinaryOp::add}) {
    Tensor want = cpu_empty({6}, DType::f32), got = gpu_poisoned({6}, DType::f32);
    cpu().binary(op, x, y, want);
    gpu().binary(op, to_gpu(x), to_gpu(y), got);
    expect_same_specials(got, want, "binary " + std::to_string(int(op)));
  }
  Tensor rows = host_values_f32({1.0, kNan, 3.0, 2.0, 5.0, kNan, 0.0, 7.0, 7.0}, {3, 3});
  Tensor want_max = cpu_empty({3, 1}, DType::f32), got_max = gpu_poisoned({3, 1}, DType::f32);
  cpu().reduce(ReduceOp::max, rows, want_max);
  gpu().reduce(ReduceOp::max, to_gpu(rows), got_max);
  expect_same_specials(got_max, want_max, "reduce max");
  EXPECT_EQ(host_values(to_host(got_max))[2], 7.0) << "a row without NaN keeps its max";
  EXPECT_TRUE(std::isnan(host_values(to_host(got_max))[0])) << "a NaN in the row makes the max NaN";
  Tensor want_arg = cpu_empty({3}, DType::i64), got_arg = gpu_poisoned({3}, DType::i64);
  cpu().argmax(rows, 1, want_arg);
  gpu().argmax(to_gpu(rows), 1, got_arg);
  expect_equal(got_arg, want_arg, "argmax: the first NaN is the max");
  EXPECT_EQ(host_values(to_host(got_arg)), (std::vector<double>{1, 2, 1}));
}

TEST(CudaNan, SoftmaxCrossEntropyAndAttention) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor logits = host_values_f32({0.0, 1.0, kNan, 2.0, 0.0, -kInf, 1.0, 2.0, -kInf, -kInf, -kInf, -kInf}, {3, 4});
  Tensor want = cpu_empty({3, 4}, DType::f32), got = gpu_poisoned({3, 4}, DType::f32);
  cpu().softmax(logits, want, false);
  gpu().softmax(to_gpu(logits), got, false);
  expect_same_specials(got, want, "softmax");

  Tensor targets = host_from_values({1, 0, 0}, {3}, DType::i64);
  Tensor want_loss = cpu_empty({3}, DType::f32), got_loss = gpu_poisoned({3}, DType::f32);
  Tensor want_d = cpu_empty({3, 4}, DType::f32), got_d = gpu_poisoned({3, 4}, DType::f32);
  cpu().cross_entropy(logits, targets, want_loss, want_d, 1.0f, -100);
  gpu().cross_entropy(to_gpu(logits), to_gpu(targets), got_loss, got_d, 1.0f, -100);
  expect_same_specials(got_loss, want_loss, "cross_entropy loss");
  EXPECT_TRUE(std::isnan(host_values(to_host(got_loss))[0])) << "a NaN logit makes its row's loss NaN";
  expect_same_specials(got_d, want_d, "cross_entropy dlogits");

  Tensor q = host_random({1, 1, 5, 8}, DType::f32, 1), v = host_random({1, 1, 5, 8}, DType::f32, 2);
  std::vector<double> kv = host_values(host_random({1, 1, 5, 8}, DType::f32, 3));
  kv[2 * 8 + 3] = kNan;  // key 2: causal rows 2..4 become NaN, rows 0..1 stay finite
  Tensor k = host_values_f32(kv, {1, 1, 5, 8});
  Tensor want_o = cpu_empty({1, 1, 5, 8}, DType::f32), want_lse = cpu_empty({1, 1, 5}, DType::f32);
  Tensor got_o = gpu_poisoned({1, 1, 5, 8}, DType::f32), got_lse = gpu_poisoned({1, 1, 5}, DType::f32);
  cpu().attention(q, k, v, want_o, want_lse, 0.35f, true);
  gpu().attention(to_gpu(q), to_gpu(k), to_gpu(v), got_o, got_lse, 0.35f, true);
  expect_same_specials(got_o, want_o, "attention out");
  const std::vector<double> out = host_values(to_host(got_o));
  EXPECT_FALSE(std::isnan(out[0]) || std::isnan(out[8])) << "rows before the NaN key stay finite";
  EXPECT_TRUE(std::isnan(out[2 * 8])) << "rows that see the NaN key are NaN";
  expect_same_specials(got_lse, want_lse, "attention lse");
}

}  // namespace
}  // namespace kiln::cuda_test
