// CUDA vs CPU: matmul (cuBLASLt / cublasDgemm) with transposed, sliced and
// broadcast operands, batches, alpha/beta, and the bias/GELU epilogues.
// f32 runs on TF32 tensor cores, so it gets TF32's tolerance.
#include "tests/gpu/cuda_test_util.h"

namespace kiln::cuda_test {
namespace {

Tol matmul_tol(DType t) { return t == DType::f32 ? kTf32Tol : tol_for(t); }

struct MatmulCase {
  Shape batch;
  int64_t M, K, N;
  Layout a, b;
};

std::string describe(const MatmulCase& c, DType t) {
  return std::string(dtype_name(t)) + " batch " + shape_str(c.batch) + " M=" + std::to_string(c.M) +
         " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) + " a " + layout_name(c.a) + " b " +
         layout_name(c.b);
}

Shape with_batch(const Shape& batch, int64_t r, int64_t c) {
  Shape s = batch;
  s.push_back(r);
  s.push_back(c);
  return s;
}

// Runs one case on both backends and compares out (and pre_gelu if asked).
void check_case(const MatmulCase& c, DType t, bool bias, bool gelu, bool save_pre, float alpha, float beta,
                uint64_t seed) {
  const DType rt = ref_dtype(t);
  Pair a = random_view(with_batch(c.batch, c.M, c.K), t, c.a, seed);
  Pair b = random_view(with_batch(c.batch, c.K, c.N), t, c.b, seed + 1);
  const Shape out_shape = with_batch(c.batch, c.M, c.N);
  Tensor out0 = host_random(out_shape, t, seed + 2);  // beta != 0 reads it
  Tensor bias_h = host_random({c.N}, t, seed + 3);

  MatmulArgs ref_args, dev_args;
  ref_args.alpha = dev_args.alpha = alpha;
  ref_args.beta = dev_args.beta = beta;
  ref_args.gelu = dev_args.gelu = gelu;
  if (bias) {
    ref_args.bias = host_cast(bias_h, rt);
    dev_args.bias = to_gpu(bias_h);
  }
  Tensor want = host_cast(out0, rt), want_pre;
  if (save_pre) ref_args.pre_gelu = want_pre = cpu_empty(out_shape, rt);
  cpu().matmul(host_cast(a.host, rt), host_cast(b.host, rt), want, ref_args);

  Tensor got = beta != 0.0f ? to_gpu(out0) : gpu_poisoned(out_shape, t), got_pre;
  if (save_pre) dev_args.pre_gelu = got_pre = gpu_poisoned(out_shape, t);
  gpu().matmul(a.dev, b.dev, got, dev_args);
  std::string what = describe(c, t) + (bias ? " +bias" : "") + (gelu ? " gelu" : "") + (save_pre ? " pre_gelu" : "") +
                     " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
  expect_close(got, want, matmul_tol(t), "matmul " + what);
  if (save_pre) expect_close(got_pre, want_pre, matmul_tol(t), "matmul pre_gelu " + what);
}

const DType kMatmulDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

TEST(CudaBackendMatmul, ShapesAndTransposedOperands) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const std::vector<MatmulCase> cases = {{{}, 1, 1, 1, Layout::contiguous, Layout::contiguous},
                                         {{}, 17, 33, 9, Layout::contiguous, Layout::contiguous},
                                         {{}, 17, 33, 9, Layout::transposed, Layout::contiguous},
                                         {{}, 17, 33, 9, Layout::contiguous, Layout::transposed},
                                         {{}, 64, 128, 96, Layout::transposed, Layout::transposed},
                                         {{}, 5, 300, 7, Layout::sliced, Layout::sliced},
                                         {{}, 1, 64, 50, Layout::contiguous, Layout::contiguous},
                                         {{}, 40, 64, 1, Layout::contiguous, Layout::transposed}};
  uint64_t seed = 1000;
  for (DType t : kMatmulDtypes)
    for (const MatmulCase& c : cases) check_case(c, t, false, false, false, 1.0f, 0.0f, seed += 10);
}

TEST(CudaBackendMatmul, BatchedWithBroadcastOperands) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const std::vector<MatmulCase> cases = {
      {{3}, 16, 24, 8, Layout::contiguous, Layout::contiguous},
      {{3, 2}, 9, 17, 11, Layout::contiguous, Layout::expanded},  // b shared across dim 0
      {{4, 2}, 12, 8, 16, Layout::expanded, Layout::transposed},  // a shared across dim 0
      {{2, 3}, 7, 5, 6, Layout::transposed, Layout::sliced}};
  uint64_t seed = 2000;
  for (DType t : kMatmulDtypes)
    for (const MatmulCase& c : cases) check_case(c, t, false, false, false, 1.0f, 0.0f, seed += 10);
}

TEST(CudaBackendMatmul, AlphaBetaBiasAndGeluEpilogues) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  // N = 96 takes cuBLASLt's fused epilogues (aux ld a multiple of 8); N = 9 the separate kernel.
  const std::vector<MatmulCase> cases = {{{}, 32, 64, 96, Layout::contiguous, Layout::transposed},
                                         {{}, 13, 20, 9, Layout::contiguous, Layout::contiguous},
                                         {{2}, 8, 16, 24, Layout::transposed, Layout::contiguous}};
  uint64_t seed = 3000;
  for (DType t : kMatmulDtypes) {
    for (const MatmulCase& c : cases) {
      check_case(c, t, true, false, false, 1.0f, 0.0f, seed += 10);   // bias
      check_case(c, t, true, true, true, 1.0f, 0.0f, seed += 10);     // bias + gelu, saving pre_gelu
      check_case(c, t, false, true, false, 1.0f, 0.0f, seed += 10);   // gelu only
      check_case(c, t, false, false, false, 0.5f, 1.0f, seed += 10);  // out = 0.5 a@b + out
      check_case(c, t, true, true, true, 2.0f, 1.0f, seed += 10);     // everything at once
    }
  }
}

TEST(CudaBackendMatmul, TransposedOutputAndEmptyInnerDim) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  Tensor a = host_random({6, 10}, DType::f32, 1), b = host_random({10, 4}, DType::f32, 2);
  Tensor want = cpu_empty({6, 4}, DType::f32);
  cpu().matmul(a, b, want, MatmulArgs{});
  Tensor base = gpu_poisoned({4, 6}, DType::f32);
  Tensor out = base.as_strided({6, 4}, {1, 6}, 0);  // column-major output view
  gpu().matmul(to_gpu(a), to_gpu(b), out, MatmulArgs{});
  expect_close(out, want, kTf32Tol, "matmul into a transposed output");

  // K = 0: the product is empty, out = beta * out + bias.
  Tensor ea = gpu_poisoned({3, 0}, DType::f32), eb = gpu_poisoned({0, 5}, DType::f32);
  Tensor bias = host_random({5}, DType::f32, 3);
  MatmulArgs args;
  args.bias = to_gpu(bias);
  Tensor eo = gpu_poisoned({3, 5}, DType::f32);
  gpu().matmul(ea, eb, eo, args);
  std::vector<double> rows;
  for (int r = 0; r < 3; ++r)
    for (double v : host_values(bias)) rows.push_back(v);
  expect_close_values(host_values(to_host(eo)), rows, tol_for(DType::f32), "matmul with K = 0");
}

// matmul_and_row_sums: a linear layer's dW = dY^T @ X with db = dY's column
// sums from the same product (cuBLASLt's BGRADB epilogue where offered, a
// reduction after it otherwise), against the CPU's product and sums; a as
// the transposed view the backward passes, and as a plain matrix.
TEST(CudaBackendMatmul, RowSumsBesideTheProduct) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  struct Case {
    int64_t M, K, N;
    Layout a;
  };
  const std::vector<Case> cases = {{96, 200, 64, Layout::transposed},
                                   {768, 1024, 256, Layout::transposed},
                                   {9, 13, 5, Layout::transposed},
                                   {64, 48, 32, Layout::contiguous}};
  uint64_t seed = 3500;
  for (DType t : kMatmulDtypes) {
    const DType rt = ref_dtype(t);
    for (const Case& c : cases) {
      Pair a = random_view({c.M, c.K}, t, c.a, seed += 10);
      Pair b = random_view({c.K, c.N}, t, Layout::contiguous, seed + 1);
      Tensor want = cpu_empty({c.M, c.N}, rt), want_sums = cpu_empty({c.M}, rt);
      cpu().matmul_and_row_sums(host_cast(a.host, rt), host_cast(b.host, rt), want, want_sums);
      Tensor got = gpu_poisoned({c.M, c.N}, t), got_sums = gpu_poisoned({c.M}, t);
      gpu().matmul_and_row_sums(a.dev, b.dev, got, got_sums);
      const std::string what = describe({{}, c.M, c.K, c.N, c.a, Layout::contiguous}, t);
      expect_close(got, want, matmul_tol(t), "matmul_and_row_sums product " + what);
      expect_close(got_sums, want_sums, matmul_tol(t), "matmul_and_row_sums sums " + what);
    }
  }
  // K = 0: an empty product and zero sums.
  Tensor out = gpu_poisoned({3, 5}, DType::f32), sums = gpu_poisoned({3}, DType::f32);
  gpu().matmul_and_row_sums(gpu_poisoned({3, 0}, DType::f32), gpu_poisoned({0, 5}, DType::f32), out, sums);
  expect_close_values(host_values(to_host(sums)), {0.0, 0.0, 0.0}, tol_for(DType::f32), "row sums with K = 0");
  Tensor wrong = gpu_poisoned({4}, DType::f32);
  EXPECT_THROW(
      gpu().matmul_and_row_sums(gpu_poisoned({3, 4}, DType::f32), gpu_poisoned({4, 5}, DType::f32), out, wrong), Error);
}

// bf16/f16 operands into an f32 out (autocast's fused cross-entropy head
// keeps its logits and gradients in f32): the rounded operands' exact product
// within f32 accumulation's error, with transposed views, beta accumulating
// into out (the head's dW over chunks), and a bias applied after.
TEST(CudaBackendMatmul, NarrowOperandsIntoF32Out) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const std::vector<MatmulCase> cases = {{{}, 17, 33, 9, Layout::contiguous, Layout::transposed},
                                         {{}, 64, 256, 96, Layout::transposed, Layout::contiguous},
                                         {{2}, 8, 16, 24, Layout::contiguous, Layout::contiguous}};
  uint64_t seed = 5000;
  for (DType t : {DType::bf16, DType::f16}) {
    for (const MatmulCase& c : cases) {
      for (const float beta : {0.0f, 1.0f}) {
        Pair a = random_view(with_batch(c.batch, c.M, c.K), t, c.a, seed += 10);
        Pair b = random_view(with_batch(c.batch, c.K, c.N), t, c.b, seed += 10);
        const Shape out_shape = with_batch(c.batch, c.M, c.N);
        Tensor out0 = host_random(out_shape, DType::f32, seed += 10), bias = host_random({c.N}, DType::f32, seed += 10);
        MatmulArgs ref_args, dev_args;
        ref_args.beta = dev_args.beta = beta;
        ref_args.bias = bias;
        dev_args.bias = to_gpu(bias);
        Tensor want = host_cast(out0, DType::f32);
        cpu().matmul(host_cast(a.host, DType::f32), host_cast(b.host, DType::f32), want, ref_args);
        Tensor got = beta != 0.0f ? to_gpu(out0) : gpu_poisoned(out_shape, DType::f32);
        gpu().matmul(a.dev, b.dev, got, dev_args);
        // Tensor cores add the exact products in f32, not in the CPU's order.
        expect_close(got, want, Tol{1e-4, 1e-4}, "matmul " + describe(c, t) + " into f32, beta " + std::to_string(beta));
      }
    }
  }
  EXPECT_TRUE(gpu().fast_bf16_to_f32_matmul());
}

TEST(CudaBackendMatmul, RejectsBadShapes) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  Tensor a = gpu_poisoned({3, 4}, DType::f32), b = gpu_poisoned({5, 2}, DType::f32),
         out = gpu_poisoned({3, 2}, DType::f32);
  EXPECT_THROW(gpu().matmul(a, b, out, MatmulArgs{}), kiln::Error);
  Tensor bi = gpu_poisoned({4, 2}, DType::i32);
  EXPECT_THROW(gpu().matmul(a, bi, out, MatmulArgs{}), kiln::Error);
}

}  // namespace
}  // namespace kiln::cuda_test
