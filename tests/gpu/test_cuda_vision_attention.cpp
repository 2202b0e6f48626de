// CUDA vs CPU: conv2d, maxpool2d and fused attention, forward and backward.
#include "kiln/cuda/attention_cudnn.h"
#include "tests/gpu/cuda_test_util.h"

namespace kiln::cuda_test {
namespace {

const DType kFloatDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

struct ConvCase {
  int64_t N, Cin, H, W, Cout, KH, KW;
  Conv2dArgs args;
  bool bias;
};

TEST(CudaBackendConv2d, ForwardAndBackwardMatchTheCpu) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const std::vector<ConvCase> cases = {{2, 3, 9, 11, 4, 3, 3, {2, 2, 1, 1}, true},
                                       {3, 5, 6, 6, 7, 1, 1, {1, 1, 0, 0}, false},
                                       {1, 1, 8, 7, 2, 5, 3, {1, 2, 2, 0}, true}};
  for (DType t : kFloatDtypes) {
    const DType rt = ref_dtype(t);
    const Tol tol = t == DType::f32 ? kTf32Tol : tol_for(t);  // f32 convolutions run on TF32 tensor cores
    for (const ConvCase& c : cases) {
      const int64_t OH = (c.H + 2 * c.args.pad_h - c.KH) / c.args.stride_h + 1;
      const int64_t OW = (c.W + 2 * c.args.pad_w - c.KW) / c.args.stride_w + 1;
      const Shape out_shape = {c.N, c.Cout, OH, OW};
      Tensor x = host_random({c.N, c.Cin, c.H, c.W}, t, 70), w = host_random({c.Cout, c.Cin, c.KH, c.KW}, t, 71);
      Tensor b = c.bias ? host_random({c.Cout}, t, 72) : Tensor();
      Tensor dout = host_random(out_shape, t, 73);
      const std::string what = std::string("conv2d ") + dtype_name(t) + " x " + shape_str(x.shape()) + " w " +
                               shape_str(w.shape()) + " stride " + std::to_string(c.args.stride_h) + "x" +
                               std::to_string(c.args.stride_w);
      Tensor want = cpu_empty(out_shape, rt);
      cpu().conv2d(host_cast(x, rt), host_cast(w, rt), c.bias ? host_cast(b, rt) : Tensor(), want, c.args);
      Tensor got = gpu_poisoned(out_shape, t);
      gpu().conv2d(to_gpu(x), to_gpu(w), c.bias ? to_gpu(b) : Tensor(), got, c.args);
      expect_close(got, want, tol, what);

      Tensor dx_ref = cpu_empty(x.shape(), rt), dw_ref = cpu_empty(w.shape(), rt), db_ref = cpu_empty({c.Cout}, rt);
      cpu().conv2d_backward(host_cast(dout, rt), host_cast(x, rt), host_cast(w, rt), dx_ref, dw_ref, db_ref, c.args);
      Tensor dx = gpu_poisoned(x.shape(), t), dw = gpu_poisoned(w.shape(), t), db = gpu_poisoned({c.Cout}, t);
      gpu().conv2d_backward(to_gpu(dout), to_gpu(x), to_gpu(w), dx, dw, db, c.args);
      Tol sums = tol;
      sums.atol = std::max(sums.atol, 4e-7 * double(c.N * OH * OW));
      expect_close(dx, dx_ref, tol, what + " dx");
      expect_close(dw, dw_ref, sums, what + " dweight");
      expect_close(db, db_ref, sums, what + " dbias");
      // Only the weight gradient.
      Tensor none1, none2, dw_only = gpu_poisoned(w.shape(), t);
      gpu().conv2d_backward(to_gpu(dout), to_gpu(x), to_gpu(w), none1, dw_only, none2, c.args);
      expect_close(dw_only, dw_ref, sums, what + " dweight alone");
    }
  }
}

TEST(CudaBackendMaxPool2d, ForwardIndicesAndBackward) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const std::vector<Pool2dArgs> cases = {{2, 2, 2, 2}, {3, 3, 2, 2}, {2, 3, 1, 2}};
  for (DType t : kFloatDtypes) {
    const DType rt = ref_dtype(t);
    for (const Pool2dArgs& a : cases) {
      const int64_t N = 2, C = 3, H = 7, W = 9;
      const int64_t OH = (H - a.kernel_h) / a.stride_h + 1, OW = (W - a.kernel_w) / a.stride_w + 1;
      Tensor x = host_random({N, C, H, W}, t, 80);
      const std::string what = std::string("maxpool2d ") + dtype_name(t) + " kernel " + std::to_string(a.kernel_h) +
                               "x" + std::to_string(a.kernel_w) + " stride " + std::to_string(a.stride_h) + "x" +
                               std::to_string(a.stride_w);
      Tensor want = cpu_empty({N, C, OH, OW}, rt), want_idx = cpu_empty({N, C, OH, OW}, DType::i32);
      cpu().maxpool2d(host_cast(x, rt), want, want_idx, a);
      Tensor got = gpu_poisoned({N, C, OH, OW}, t), idx = gpu_poisoned({N, C, OH, OW}, DType::i32);
      gpu().maxpool2d(to_gpu(x), got, idx, a);
      expect_close(got, want, tol_for(t), what);
      expect_equal(idx, want_idx, what + " indices");

      Tensor dout = host_random({N, C, OH, OW}, t, 81);
      Tensor dx_ref = cpu_empty(x.shape(), rt);
      cpu().maxpool2d_backward(host_cast(dout, rt), want_idx, dx_ref);
      Tensor dx = gpu_poisoned(x.shape(), t);
      gpu().maxpool2d_backward(to_gpu(dout), idx, dx);
      expect_close(dx, dx_ref, tol_for(t), what + " backward");
    }
  }
}

struct AttentionCase {
  int64_t B, H, T, D;
  bool causal;
};

TEST(CudaBackendAttention, ForwardAndBackwardMatchTheCpu) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  // Head dims 64 and 128 in bf16/f16 run the tensor-core kernels
  // (attention_tc.cu): lengths below, at and across their 64-row tiles.
  const std::vector<AttentionCase> cases = {{2, 3, 37, 16, true},   {2, 3, 37, 64, false},  {1, 2, 1, 32, true},
                                            {1, 2, 130, 80, true},  {2, 1, 33, 128, true},  {1, 1, 20, 7, false},
                                            {1, 2, 200, 64, true},  {2, 1, 64, 64, true},   {1, 2, 129, 128, false},
                                            {1, 1, 300, 128, true}, {1, 1, 1, 64, false},   {1, 3, 65, 64, false}};
  for (DType t : kFloatDtypes) {
    const DType rt = ref_dtype(t), lt = t == DType::f64 ? DType::f64 : DType::f32;
    Tol tol = tol_for(t);
    if (t == DType::f32) tol = {1e-5, 1e-5};
    for (const AttentionCase& c : cases) {
      const Shape shape = {c.B, c.H, c.T, c.D}, lse_shape = {c.B, c.H, c.T};
      const float scale = 1.0f / std::sqrt(float(c.D));
      Tensor q = host_random(shape, t, 90), k = host_random(shape, t, 91), v = host_random(shape, t, 92);
      Tensor dout = host_random(shape, t, 93);
      const std::string what =
          std::string("attention ") + dtype_name(t) + " " + shape_str(shape) + (c.causal ? " causal" : "");
      Tensor out_ref = cpu_empty(shape, rt), lse_ref = cpu_empty(lse_shape, rt);
      cpu().attention(host_cast(q, rt), host_cast(k, rt), host_cast(v, rt), out_ref, lse_ref, scale, c.causal);
      Tensor qd = to_gpu(q), kd = to_gpu(k), vd = to_gpu(v);
      Tensor out = gpu_poisoned(shape, t), lse = gpu_poisoned(lse_shape, lt);
      gpu().attention(qd, kd, vd, out, lse, scale, c.causal);
      expect_close(out, out_ref, tol, what + " out");
      expect_close(lse, lse_ref, t == DType::f64 ? tol : Tol{1e-5, 1e-5}, what + " lse");

      Tensor dq_ref = cpu_empty(shape, rt), dk_ref = cpu_empty(shape, rt), dv_ref = cpu_empty(shape, rt);
      cpu().attention_backward(host_cast(dout, rt), host_cast(q, rt), host_cast(k, rt), host_cast(v, rt), out_ref,
                               lse_ref, dq_ref, dk_ref, dv_ref, scale, c.causal);
      Tensor dq = gpu_poisoned(shape, t), dk = gpu_poisoned(shape, t), dv = gpu_poisoned(shape, t);
      gpu().attention_backward(to_gpu(dout), qd, kd, vd, out, lse, dq, dk, dv, scale, c.causal);
      expect_close(dq, dq_ref, tol, what + " dq");
      expect_close(dk, dk_ref, tol, what + " dk");
      expect_close(dv, dv_ref, tol, what + " dv");
    }
  }
}

// The tensor-core path keeps the CPU's special values: a NaN key makes the
// rows that see it NaN (causal rows before it stay finite), and a view that is
// not 16-byte aligned runs the CUDA-core kernel with the same answer.
TEST(CudaBackendAttention, TensorCorePathNaNAndMisalignedViews) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  kiln::cuda::set_cudnn_attention_enabled(false);  // Kiln's own kernels (cuDNN's: test_cuda_attention_cudnn.cpp)
  const int64_t T = 100, D = 64;
  const Shape shape = {1, 1, T, D};
  Tensor q = host_random(shape, DType::bf16, 1), v = host_random(shape, DType::bf16, 2);
  std::vector<double> kv = host_values(host_random(shape, DType::bf16, 3));
  kv[70 * D + 5] = std::nan("");  // key 70
  Tensor k = host_from_values(kv, shape, DType::bf16);
  Tensor out = gpu_poisoned(shape, DType::bf16), lse = gpu_poisoned({1, 1, T}, DType::f32);
  gpu().attention(to_gpu(q), to_gpu(k), to_gpu(v), out, lse, 0.125f, true);
  const std::vector<double> o = host_values(to_host(out));
  for (int64_t t = 0; t < T; ++t)
    EXPECT_EQ(std::isnan(o[size_t(t * D)]), t >= 70) << "row " << t;

  // One element past an aligned block: every row is 2 bytes off 16.
  Tensor big = to_gpu(host_random({T * D + 1}, DType::bf16, 4));
  Tensor shifted = big.slice(0, 1, T * D + 1).view(shape);
  ASSERT_NE(reinterpret_cast<uintptr_t>(shifted.data_ptr()) % 16, 0u);
  Tensor aligned = to_gpu(to_host(shifted));
  Tensor o1 = gpu_poisoned(shape, DType::bf16), o2 = gpu_poisoned(shape, DType::bf16);
  Tensor l1 = gpu_poisoned({1, 1, T}, DType::f32), l2 = gpu_poisoned({1, 1, T}, DType::f32);
  gpu().attention(shifted, shifted, shifted, o1, l1, 0.125f, false);
  gpu().attention(aligned, aligned, aligned, o2, l2, 0.125f, false);
  expect_close(o1, to_host(o2), tol_for(DType::bf16), "misaligned view against its aligned copy");
  kiln::cuda::set_cudnn_attention_enabled(true);
}

// The heads of a packed [B, T, 3, H, D] projection (the GPT's q|k|v), an
// output written in [B, T, H, D] order and gradients written into one packed
// buffer are read and written in place by the tensor-core kernels, with the
// CPU's answers; every element of the poisoned packed gradient is written.
// Both by Kiln's kernels and by cuDNN's (where libcudnn loads).
TEST(CudaBackendAttention, TensorCorePathReadsPackedHeadsInPlace) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  struct Case {
    int64_t B, H, T, D;
    DType t;
    bool causal;
    bool cudnn;
  };
  for (const Case& c : {Case{2, 3, 100, 64, DType::bf16, true, false}, Case{1, 2, 70, 128, DType::f16, false, false},
                        Case{2, 3, 100, 64, DType::bf16, true, true}, Case{1, 2, 70, 128, DType::f16, false, true}}) {
    kiln::cuda::set_cudnn_attention_enabled(c.cudnn);
    const int64_t C = c.H * c.D;
    const Shape shape = {c.B, c.H, c.T, c.D};
    const std::string what = std::string("packed attention ") + dtype_name(c.t) + " " + shape_str(shape) +
                             (c.cudnn ? " (cuDNN where loaded)" : " (Kiln's kernels)");
    auto heads = [&](const Tensor& packed, int64_t part) {
      return packed.as_strided(shape, {c.T * 3 * C, c.D, 3 * C, 1}, packed.offset() + part * C);
    };
    auto in_bthd = [&](const Tensor& t) { return t.as_strided(shape, {c.T * C, c.D, C, 1}, t.offset()); };
    const float scale = 1.0f / std::sqrt(float(c.D));
    Tensor packed = to_gpu(host_random({c.B, c.T, 3 * C}, c.t, 11));
    Tensor q = heads(packed, 0), k = heads(packed, 1), v = heads(packed, 2);
    ASSERT_FALSE(q.is_contiguous());
    Tensor out = in_bthd(gpu_poisoned({c.B, c.T, c.H, c.D}, c.t)), lse = gpu_poisoned({c.B, c.H, c.T}, DType::f32);
    gpu().attention(q, k, v, out, lse, scale, c.causal);
    Tensor qh = host_cast(to_host(q), DType::f32), kh = host_cast(to_host(k), DType::f32);
    Tensor vh = host_cast(to_host(v), DType::f32);
    Tensor out_ref = cpu_empty(shape, DType::f32), lse_ref = cpu_empty({c.B, c.H, c.T}, DType::f32);
    cpu().attention(qh, kh, vh, out_ref, lse_ref, scale, c.causal);
    expect_close(out, out_ref, tol_for(c.t), what + " out");
    expect_close(lse, lse_ref, Tol{1e-5, 1e-5}, what + " lse");

    Tensor dout = in_bthd(to_gpu(host_random({c.B, c.T, c.H, c.D}, c.t, 12)));
    Tensor grad = gpu_poisoned({c.B, c.T, 3 * C}, c.t);
    Tensor dq = heads(grad, 0), dk = heads(grad, 1), dv = heads(grad, 2);
    gpu().attention_backward(dout, q, k, v, out, lse, dq, dk, dv, scale, c.causal);
    Tensor dq_ref = cpu_empty(shape, DType::f32), dk_ref = cpu_empty(shape, DType::f32);
    Tensor dv_ref = cpu_empty(shape, DType::f32);
    cpu().attention_backward(host_cast(to_host(dout), DType::f32), qh, kh, vh, out_ref, lse_ref, dq_ref, dk_ref,
                             dv_ref, scale, c.causal);
    expect_close(dq, dq_ref, tol_for(c.t), what + " dq");
    expect_close(dk, dk_ref, tol_for(c.t), what + " dk");
    expect_close(dv, dv_ref, tol_for(c.t), what + " dv");
  }
  kiln::cuda::set_cudnn_attention_enabled(true);
}

TEST(CudaBackendAttention, RejectsHeadDimAbove128) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  Tensor q = gpu_poisoned({1, 1, 4, 129}, DType::f32), out = gpu_poisoned({1, 1, 4, 129}, DType::f32);
  Tensor lse = gpu_poisoned({1, 1, 4}, DType::f32);
  EXPECT_THROW(gpu().attention(q, q, q, out, lse, 1.0f, true), kiln::Error);
}

}  // namespace
}  // namespace kiln::cuda_test
