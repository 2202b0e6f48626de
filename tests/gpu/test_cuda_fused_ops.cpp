// CUDA vs CPU for the fused memory-saving ops: linear_cross_entropy (several
// row chunks, ignored rows) and linear_of_gelu, forward and gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/autograd/ops.h"
#include "kiln/backend/factory.h"
#include "kiln/nn/init.h"

namespace kiln {
namespace {

void expect_close(const Tensor& got, const Tensor& want, double tol, const char* what) {
  std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " [" << i << "]";
}

struct Result {
  Tensor out, gx, gw, gb;
};

template <typename F>
Result run_on(Device d, const Tensor& x, const Tensor& w, const Tensor& b, F f) {
  // Fresh leaves on each device: x.to(cpu) is x itself, so without detach()
  // the CPU run would make x require grad, and the CUDA copy would then be
  // a non-leaf whose gradient flows back to x instead of staying in xd.
  Tensor xd = x.detach().to(d).set_requires_grad(), wd = w.detach().to(d).set_requires_grad();
  Tensor bd = b.defined() ? b.detach().to(d).set_requires_grad() : Tensor();
  Tensor out = f(xd, wd, bd);
  sum(out).backward();
  return {out.to(Device::cpu()), xd.grad().to(Device::cpu()), wd.grad().to(Device::cpu()),
          bd.defined() ? bd.grad().to(Device::cpu()) : Tensor()};
}

TEST(CudaFusedOps, LinearCrossEntropyMatchesTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Generator g(1);
  Tensor x = nn::normal_tensor({700, 32}, 1.0, g), w = nn::normal_tensor({50, 32}, 0.2, g);
  std::vector<int64_t> t(700);
  for (size_t i = 0; i < t.size(); ++i) t[i] = i % 13 == 0 ? -100 : int64_t((i * 7) % 50);
  Tensor targets = Tensor::from_vector(t, {700});
  auto f = [&](const Tensor& xx, const Tensor& ww, const Tensor&) {
    return linear_cross_entropy(xx, ww, targets.to(xx.device()));
  };
  Result cpu = run_on(Device::cpu(), x, w, Tensor(), f), gpu = run_on(Device::cuda(), x, w, Tensor(), f);
  expect_close(gpu.out, cpu.out, 1e-3, "loss");  // TF32 GEMMs on the GPU
  expect_close(gpu.gx, cpu.gx, 1e-3, "dx");
  expect_close(gpu.gw, cpu.gw, 1e-3, "dweight");
}

TEST(CudaFusedOps, LinearOfGeluMatchesTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Generator g(2);
  Tensor h = nn::normal_tensor({4, 33, 64}, 1.0, g), w = nn::normal_tensor({16, 64}, 0.2, g);
  Tensor b = nn::normal_tensor({16}, 0.2, g);
  auto f = [](const Tensor& hh, const Tensor& ww, const Tensor& bb) { return linear_of_gelu(hh, ww, bb, false); };
  Result cpu = run_on(Device::cpu(), h, w, b, f), gpu = run_on(Device::cuda(), h, w, b, f);
  expect_close(gpu.out, cpu.out, 1e-3, "y");
  expect_close(gpu.gx, cpu.gx, 1e-3, "dh");
  expect_close(gpu.gw, cpu.gw, 1e-3, "dweight");
  expect_close(gpu.gb, cpu.gb, 1e-3, "dbias");
}

}  // namespace
}  // namespace kiln
