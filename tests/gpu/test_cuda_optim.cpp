// CUDA vs CPU: AdamW and SGD steps over several parameters at once (the
// multi-tensor kernel), including sizes that span several 16K-element chunks.
#include "tests/gpu/cuda_test_util.h"

namespace kiln::cuda_test {
namespace {

struct Params {
  std::vector<ParamSlots> host, dev;
};

Params make_params(DType t, bool with_v, uint64_t seed) {
  Params p;
  for (int64_t n : {int64_t(1), int64_t(17), int64_t(20000), int64_t(70001)}) {
    const Shape shape = n == 20000 ? Shape{100, 200} : Shape{n};
    ParamSlots h;
    h.param = host_random(shape, t, seed++);
    h.grad = host_random(shape, t, seed++);
    h.m = host_random(shape, t, seed++, -0.1, 0.1);
    if (with_v) h.v = host_random(shape, t, seed++, 0.0, 0.01);
    ParamSlots d;
    d.param = to_gpu(h.param);
    d.grad = to_gpu(h.grad);
    d.m = to_gpu(h.m);
    if (with_v) d.v = to_gpu(h.v);
    p.host.push_back(h);
    p.dev.push_back(d);
  }
  return p;
}

void expect_params_close(const Params& p, bool with_v, Tol tol, const std::string& what) {
  for (size_t i = 0; i < p.host.size(); ++i) {
    const std::string w = what + " param " + std::to_string(i);
    expect_close(p.dev[i].param, p.host[i].param, tol, w);
    expect_close(p.dev[i].m, p.host[i].m, tol, w + " m");
    if (with_v) expect_close(p.dev[i].v, p.host[i].v, tol, w + " v");
  }
}

TEST(CudaBackendOptim, AdamWMatchesTheCpuOverSeveralSteps) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (DType t : {DType::f32, DType::f64}) {
    Params p = make_params(t, true, 50);
    AdamWArgs args;
    args.lr = 1e-2f;
    args.weight_decay = 0.1f;
    args.grad_scale = 0.5f;
    for (int64_t step = 1; step <= 3; ++step) {
      args.step = step;
      cpu().adamw_step(p.host, args);
      gpu().adamw_step(p.dev, args);
    }
    expect_params_close(p, true, t == DType::f32 ? Tol{1e-5, 1e-6} : Tol{1e-12, 1e-14},
                        std::string("adamw ") + dtype_name(t));
  }
}

TEST(CudaBackendOptim, SgdWithMomentumAndNesterov) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (DType t : {DType::f32, DType::f64}) {
    for (bool nesterov : {false, true}) {
      Params p = make_params(t, false, 60);
      SgdArgs args;
      args.lr = 0.05f;
      args.momentum = 0.9f;
      args.weight_decay = 0.01f;
      args.nesterov = nesterov;
      args.grad_scale = 2.0f;
      for (int step = 0; step < 3; ++step) {
        args.first_step = step == 0;
        cpu().sgd_step(p.host, args);
        gpu().sgd_step(p.dev, args);
      }
      expect_params_close(p, false, t == DType::f32 ? Tol{1e-5, 1e-6} : Tol{1e-12, 1e-14},
                          std::string("sgd ") + dtype_name(t) + (nesterov ? " nesterov" : ""));
    }
  }
}

TEST(CudaBackendOptim, PlainSgdNeedsNoMomentumBuffer) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  Tensor p = host_random({33}, DType::f32, 1), g = host_random({33}, DType::f32, 2);
  std::vector<ParamSlots> host = {{host_cast(p, DType::f32), g, Tensor(), Tensor()}};
  std::vector<ParamSlots> dev = {{to_gpu(p), to_gpu(g), Tensor(), Tensor()}};
  SgdArgs args;
  args.lr = 0.1f;
  cpu().sgd_step(host, args);
  gpu().sgd_step(dev, args);
  expect_close(dev[0].param, host[0].param, tol_for(DType::f32), "plain sgd");
}

}  // namespace
}  // namespace kiln::cuda_test
