// CPU attention forward/backward against a naive float64 reference that
// materialises S, P and every gradient matrix, and against finite
// differences on the f64 op.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu_nn_test_util.h"
#include "kiln/backend/backend.h"
#include "kiln/cpu/attention_bf16.h"
#include "kiln/cpu/gemm.h"

namespace kiln {
namespace {

using namespace test_nn;

struct AttnRef {
  std::vector<double> out, lse, dq, dk, dv;
};

// Standard attention, one (b, h) at a time, with full T x T matrices.
AttnRef ref_attention(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                      const std::vector<double>& dout, int64_t BH, int64_t T, int64_t D, double scale, bool causal) {
  AttnRef r{std::vector<double>(q.size()), std::vector<double>(BH * T), std::vector<double>(q.size()),
            std::vector<double>(q.size()), std::vector<double>(q.size())};
  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t o = bh * T * D;
    std::vector<double> P(T * T, 0.0), dP(T * T, 0.0), dS(T * T, 0.0);
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> s(T, -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < T; ++j) {
        if (causal && j > i) continue;
        s[j] = 0;
        for (int64_t d = 0; d < D; ++d) s[j] += q[o + i * D + d] * k[o + j * D + d];
        s[j] *= scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) sum += std::exp(s[j] - mx);
      for (int64_t j = 0; j < T; ++j) P[i * T + j] = std::exp(s[j] - mx) / sum;
      r.lse[bh * T + i] = mx + std::log(sum);
    }
    for (int64_t i = 0; i < T; ++i)
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < T; ++j) acc += P[i * T + j] * v[o + j * D + d];
        r.out[o + i * D + d] = acc;
      }
    for (int64_t i = 0; i < T; ++i) {
      double rowsum = 0;  // sum_d dO_id * O_id
      for (int64_t d = 0; d < D; ++d) rowsum += dout[o + i * D + d] * r.out[o + i * D + d];
      for (int64_t j = 0; j < T; ++j) {
        for (int64_t d = 0; d < D; ++d) dP[i * T + j] += dout[o + i * D + d] * v[o + j * D + d];
        dS[i * T + j] = P[i * T + j] * (dP[i * T + j] - rowsum);
      }
    }
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        for (int64_t d = 0; d < D; ++d) {
          r.dq[o + i * D + d] += scale * dS[i * T + j] * k[o + j * D + d];
          r.dk[o + j * D + d] += scale * dS[i * T + j] * q[o + i * D + d];
          r.dv[o + j * D + d] += P[i * T + j] * dout[o + i * D + d];
        }
  }
  return r;
}

TEST(CpuNnOpsAttention, ForwardAndBackwardMatchReference) {
  struct Case {
    int64_t B, H, T, D;
  };
  // 150 positions: causal heads in 64-row blocks, the last one ragged.
  for (const Case& c : {Case{2, 3, 5, 4}, Case{1, 2, 17, 16}, Case{2, 2, 64, 32}, Case{1, 1, 1, 8}, Case{1, 2, 150, 8}}) {
    for (bool causal : {true, false}) {
      const Shape s = {c.B, c.H, c.T, c.D};
      const int64_t n = shape_numel(s);
      auto qv = random_values(n, 50, -2, 2), kv = random_values(n, 51, -2, 2), vv = random_values(n, 52);
      auto gv = random_values(n, 53);
      const double scale = 1.0 / std::sqrt(double(c.D));
      auto ref = ref_attention(qv, kv, vv, gv, c.B * c.H, c.T, c.D, scale, causal);
      const std::string what = shape_str(s) + (causal ? " causal" : " full");

      Tensor q = make<float>(qv, s), k = make<float>(kv, s), v = make<float>(vv, s);
      Tensor out = poisoned(s), lse = poisoned({c.B, c.H, c.T});
      test_nn::cpu().attention(q, k, v, out, lse, float(scale), causal);
      expect_near_all(read<float>(out), ref.out, 1e-5, 1e-4, "out " + what);
      expect_near_all(read<float>(lse), ref.lse, 1e-5, 1e-5, "lse " + what);

      Tensor dq = poisoned(s), dk = poisoned(s), dv = poisoned(s);
      test_nn::cpu().attention_backward(make<float>(gv, s), q, k, v, out, lse, dq, dk, dv, float(scale), causal);
      expect_near_all(read<float>(dq), ref.dq, 1e-5, 1e-4, "dq " + what);
      expect_near_all(read<float>(dk), ref.dk, 1e-5, 1e-4, "dk " + what);
      expect_near_all(read<float>(dv), ref.dv, 1e-5, 1e-4, "dv " + what);
    }
  }
}

TEST(CpuNnOpsAttention, F64GradientsMatchFiniteDifferences) {
  const int64_t B = 1, H = 2, T = 5, D = 3;
  const Shape s = {B, H, T, D};
  const int64_t n = shape_numel(s);
  const float scale = 0.7f;
  Tensor q = make<double>(random_values(n, 54), s), k = make<double>(random_values(n, 55), s);
  Tensor v = make<double>(random_values(n, 56), s);
  auto r = random_values(n, 57);
  for (bool causal : {true, false}) {
    auto loss = [&] {
      Tensor out = poisoned(s, DType::f64), lse = poisoned({B, H, T}, DType::f64);
      test_nn::cpu().attention(q, k, v, out, lse, scale, causal);
      return dot(read<double>(out), r);
    };
    Tensor out = poisoned(s, DType::f64), lse = poisoned({B, H, T}, DType::f64);
    test_nn::cpu().attention(q, k, v, out, lse, scale, causal);
    Tensor dq = poisoned(s, DType::f64), dk = poisoned(s, DType::f64), dv = poisoned(s, DType::f64);
    test_nn::cpu().attention_backward(make<double>(r, s), q, k, v, out, lse, dq, dk, dv, scale, causal);
    expect_near_all(read<double>(dq), finite_diff(q, loss), 1e-7, 1e-6, "dq");
    expect_near_all(read<double>(dk), finite_diff(k, loss), 1e-7, 1e-6, "dk");
    expect_near_all(read<double>(dv), finite_diff(v, loss), 1e-7, 1e-6, "dv");
  }
}

// bf16 heads on a CPU with AVX512-BF16: Kiln's own kernels
// (kiln/cpu/attention_bf16.h) where the head size is a multiple of 16, and
// oneDNN's products with them turned off, both against the f64 reference
// on the same bf16-rounded inputs. q, k and v are views of one packed
// [B, T, 3C] projection, as the GPT passes them. Both round P and dS to
// bf16 (as flash attention does), so the bound is a few bf16 roundings of
// each output's largest value.
TEST(CpuNnOpsAttention, Bf16KernelsMatchReference) {
  if (!cpu::bf16_gemm_available() || !cpu::bf16_attention_kernels_apply(16))
    GTEST_SKIP() << "this CPU has no AVX512-BF16 (or bf16 products lose to f32 here): the kernels do not run";
  struct Case {
    int64_t B, H, T, D;
  };
  // 1 and 17 positions: a lone row, a ragged tile; 150: ragged 8-row tiles
  // and a key count that is not a multiple of 16.
  for (const Case& c : {Case{1, 2, 1, 16}, Case{2, 1, 17, 32}, Case{1, 2, 64, 48}, Case{1, 2, 150, 32},
                        Case{1, 1, 150, 64}}) {
    const int64_t C = c.H * c.D;
    const Shape s = {c.B, c.H, c.T, c.D}, packed = {c.B, c.T, 3 * C};
    Tensor qkv = make<float>(random_values(shape_numel(packed), 60, -2, 2), packed).to(DType::bf16);
    auto heads = [&](int64_t which) {
      return qkv.as_strided(s, {c.T * 3 * C, c.D, 3 * C, 1}, qkv.offset() + which * C);
    };
    Tensor q = heads(0), k = heads(1), v = heads(2);
    Tensor g = make<float>(random_values(shape_numel(s), 61), s).to(DType::bf16);
    auto values = [](const Tensor& t) { return read<double>(t.to(DType::f64).contiguous()); };
    for (bool causal : {true, false}) {
      const double scale = 1.0 / std::sqrt(double(c.D));
      const AttnRef ref = ref_attention(values(q), values(k), values(v), values(g), c.B * c.H, c.T, c.D, scale, causal);
      for (bool kernels : {true, false}) {
        cpu::bf16_attention_kernels_allowed = kernels;
        const std::string what = shape_str(s) + (causal ? " causal" : " full") + (kernels ? " kernels" : " oneDNN");
        auto poisoned16 = [&] {
          Tensor t = Tensor::empty(s, DType::bf16);
          test_nn::cpu().fill(t, NAN);
          return t;
        };
        Tensor out = poisoned16(), lse = poisoned({c.B, c.H, c.T});
        test_nn::cpu().attention(q, k, v, out, lse, float(scale), causal);
        Tensor dq = poisoned16(), dk = poisoned16(), dv = poisoned16();
        test_nn::cpu().attention_backward(g, q, k, v, out, lse, dq, dk, dv, float(scale), causal);
        auto expect_close = [&](const Tensor& got, const std::vector<double>& want, const char* name) {
          double largest = 0;
          for (double x : want) largest = std::max(largest, std::abs(x));
          expect_near_all(values(got), want, largest / 64, 1.0 / 64, std::string(name) + " " + what);
        };
        expect_close(out, ref.out, "out");
        expect_near_all(read<float>(lse), ref.lse, 1e-3, 1e-3, "lse " + what);
        expect_close(dq, ref.dq, "dq");
        expect_close(dk, ref.dk, "dk");
        expect_close(dv, ref.dv, "dv");
      }
      cpu::bf16_attention_kernels_allowed = true;
    }
  }
}

TEST(CpuNnOpsAttention, MismatchedShapesThrow) {
  Tensor q = poisoned({1, 2, 4, 8}), k = poisoned({1, 2, 5, 8}), out = poisoned({1, 2, 4, 8});
  Tensor lse = poisoned({1, 2, 4});
  EXPECT_THROW(test_nn::cpu().attention(q, k, q, out, lse, 1.0f, true), Error);
  Tensor bad_lse = poisoned({1, 2, 5});
  EXPECT_THROW(test_nn::cpu().attention(q, q, q, out, bad_lse, 1.0f, true), Error);
}

}  // namespace
}  // namespace kiln
