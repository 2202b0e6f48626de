// cuDNN's fused attention (kiln/cuda/attention_cudnn.h) against the CPU and
// against Kiln's own tensor-core kernels: each pass alone, a forward by one
// with the backward by the other (their log-sum-exps must agree), the same
// bits on a second backward, and NaN where the CPU has NaN. Skipped where
// libcudnn cannot be loaded (kiln info says why).
#include "kiln/cuda/attention_cudnn.h"
#include "tests/gpu/cuda_test_util.h"

namespace kiln::cuda_test {
namespace {

#define SKIP_WITHOUT_CUDNN()                                                                       \
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();                \
  if (kiln::cuda::cudnn_attention_status().rfind("cuDNN ", 0) != 0)                                 \
  GTEST_SKIP() << kiln::cuda::cudnn_attention_status()

// Sends attention to Kiln's kernels while it lives.
struct KilnKernelsOnly {
  KilnKernelsOnly() { kiln::cuda::set_cudnn_attention_enabled(false); }
  ~KilnKernelsOnly() { kiln::cuda::set_cudnn_attention_enabled(true); }
};

struct Case {
  int64_t B, H, T, D;
  bool causal;
};

TEST(CudnnAttention, MatchesTheCpuAndKilnsKernelsPassForPass) {
  SKIP_WITHOUT_CUDNN();
  const std::vector<Case> cases = {{2, 3, 37, 64, true},    {1, 2, 200, 64, true},   {2, 1, 64, 64, false},
                                   {1, 2, 129, 128, false}, {1, 1, 300, 128, true},  {1, 3, 65, 64, false},
                                   {2, 2, 1024, 128, true}, {1, 2, 1000, 64, true}};
  for (DType t : {DType::bf16, DType::f16}) {
    const Tol tol = tol_for(t), lse_tol = {1e-5, 1e-5};
    for (const Case& c : cases) {
      const Shape shape = {c.B, c.H, c.T, c.D}, lse_shape = {c.B, c.H, c.T};
      const float scale = 1.0f / std::sqrt(float(c.D));
      const std::string what =
          std::string("cuDNN attention ") + dtype_name(t) + " " + shape_str(shape) + (c.causal ? " causal" : "");
      Tensor q = host_random(shape, t, 90), k = host_random(shape, t, 91), v = host_random(shape, t, 92);
      Tensor dout = host_random(shape, t, 93);
      Tensor qf = host_cast(q, DType::f32), kf = host_cast(k, DType::f32), vf = host_cast(v, DType::f32);
      Tensor out_ref = cpu_empty(shape, DType::f32), lse_ref = cpu_empty(lse_shape, DType::f32);
      cpu().attention(qf, kf, vf, out_ref, lse_ref, scale, c.causal);
      Tensor dq_ref = cpu_empty(shape, DType::f32), dk_ref = cpu_empty(shape, DType::f32);
      Tensor dv_ref = cpu_empty(shape, DType::f32);
      cpu().attention_backward(host_cast(dout, DType::f32), qf, kf, vf, out_ref, lse_ref, dq_ref, dk_ref, dv_ref,
                               scale, c.causal);

      Tensor qd = to_gpu(q), kd = to_gpu(k), vd = to_gpu(v), dd = to_gpu(dout);
      Tensor out = gpu_poisoned(shape, t), lse = gpu_poisoned(lse_shape, DType::f32);
      ASSERT_TRUE(kiln::cuda::cudnn_attention(qd, kd, vd, out, lse, scale, c.causal)) << what << ": declined";
      expect_close(out, out_ref, tol, what + " out");
      expect_close(lse, lse_ref, lse_tol, what + " lse");
      Tensor dq = gpu_poisoned(shape, t), dk = gpu_poisoned(shape, t), dv = gpu_poisoned(shape, t);
      ASSERT_TRUE(kiln::cuda::cudnn_attention_backward(dd, qd, kd, vd, out, lse, dq, dk, dv, scale, c.causal))
          << what << ": backward declined";
      expect_close(dq, dq_ref, tol, what + " dq");
      expect_close(dk, dk_ref, tol, what + " dk");
      expect_close(dv, dv_ref, tol, what + " dv");

      // The deterministic algorithm: a second backward gives the same bits.
      Tensor dq2 = gpu_poisoned(shape, t), dk2 = gpu_poisoned(shape, t), dv2 = gpu_poisoned(shape, t);
      ASSERT_TRUE(kiln::cuda::cudnn_attention_backward(dd, qd, kd, vd, out, lse, dq2, dk2, dv2, scale, c.causal));
      expect_equal(dq2, to_host(dq), what + " dq again");
      expect_equal(dk2, to_host(dk), what + " dk again");

      // Kiln's backward from cuDNN's forward, and cuDNN's from Kiln's.
      Tensor kq = gpu_poisoned(shape, t), kk = gpu_poisoned(shape, t), kv = gpu_poisoned(shape, t);
      Tensor kout = gpu_poisoned(shape, t), klse = gpu_poisoned(lse_shape, DType::f32);
      {
        KilnKernelsOnly kiln_only;
        gpu().attention_backward(dd, qd, kd, vd, out, lse, kq, kk, kv, scale, c.causal);
        gpu().attention(qd, kd, vd, kout, klse, scale, c.causal);
      }
      expect_close(kq, dq_ref, tol, what + " Kiln's dq from cuDNN's forward");
      expect_close(kv, dv_ref, tol, what + " Kiln's dv from cuDNN's forward");
      Tensor cq = gpu_poisoned(shape, t), ck = gpu_poisoned(shape, t), cv = gpu_poisoned(shape, t);
      ASSERT_TRUE(kiln::cuda::cudnn_attention_backward(dd, qd, kd, vd, kout, klse, cq, ck, cv, scale, c.causal));
      expect_close(cq, dq_ref, tol, what + " cuDNN's dq from Kiln's forward");
      expect_close(ck, dk_ref, tol, what + " cuDNN's dk from Kiln's forward");
    }
  }
}

// A NaN key makes NaN the rows that see it, as on the CPU; causal rows
// before it stay finite.
TEST(CudnnAttention, NaNReachesOnlyTheRowsThatSeeIt) {
  SKIP_WITHOUT_CUDNN();
  const int64_t T = 100, D = 64;
  const Shape shape = {1, 1, T, D};
  Tensor q = host_random(shape, DType::bf16, 1), v = host_random(shape, DType::bf16, 2);
  std::vector<double> kv = host_values(host_random(shape, DType::bf16, 3));
  kv[70 * D + 5] = std::nan("");  // key 70
  Tensor k = host_from_values(kv, shape, DType::bf16);
  Tensor out = gpu_poisoned(shape, DType::bf16), lse = gpu_poisoned({1, 1, T}, DType::f32);
  ASSERT_TRUE(kiln::cuda::cudnn_attention(to_gpu(q), to_gpu(k), to_gpu(v), out, lse, 0.125f, true));
  const std::vector<double> o = host_values(to_host(out));
  for (int64_t t = 0; t < T; ++t) EXPECT_EQ(std::isnan(o[size_t(t * D)]), t >= 70) << "row " << t;
}

}  // namespace
}  // namespace kiln::cuda_test
