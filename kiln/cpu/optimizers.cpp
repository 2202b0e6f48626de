// AdamW and SGD steps over a list of parameters, with PyTorch's semantics
// (torch.optim.AdamW / torch.optim.SGD with dampening 0), so a run can be
// checked step by step against PyTorch.
//
// AdamW, with g = grad * grad_scale:
//   p -= lr * wd * p                      (decoupled weight decay)
//   m  = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
//   p -= lr/(1 - b1^t) * m / (sqrt(v)/sqrt(1 - b2^t) + eps)
// which is lr * mhat / (sqrt(vhat) + eps), arranged as PyTorch computes it.
//
// SGD, with g = grad * grad_scale + wd * p:
//   buf = first_step ? g : momentum * buf + g
//   p  -= lr * (nesterov ? g + momentum * buf : buf)     (buf only if momentum != 0)
//
// Every element is independent, so results do not depend on the thread count.
#include <cmath>

#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kParallelElements = kParallelMinElements;

void check_slot(const char* op, size_t index, const Tensor& t, const char* what, const Tensor& param) {
  KILN_CHECK(t.defined(), op, ": parameter ", index, " has no ", what, " tensor");
  check_cpu(t, op);
  check_contiguous(t, op, what);
  KILN_CHECK(t.shape() == param.shape() && t.dtype() == param.dtype(), op, ": parameter ", index, "'s ", what,
             " is ", t.str(), " but the parameter is ", param.str());
}

}  // namespace

void CpuBackend::adamw_step(std::vector<ParamSlots>& params, const AdamWArgs& args) {
  const char* op = "adamw_step";
  KILN_CHECK(args.step >= 1, op, ": step is 1-based, got ", args.step);
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSlots& s = params[i];
    KILN_CHECK(s.param.defined(), op, ": parameter ", i, " is undefined");
    check_slot(op, i, s.param, "param", s.param);
    check_slot(op, i, s.grad, "grad", s.param);
    check_slot(op, i, s.m, "m", s.param);
    check_slot(op, i, s.v, "v", s.param);
  }
  const double bias1 = 1.0 - std::pow(double(args.beta1), double(args.step));
  const double bias2 = 1.0 - std::pow(double(args.beta2), double(args.step));
  for (ParamSlots& s : params) {
    dispatch_float(s.param.dtype(), op, [&]<typename T>() {
      T* p = s.param.data<T>();
      const T* g = s.grad.data<T>();
      T* m = s.m.data<T>();
      T* v = s.v.data<T>();
      const T decay = T(1.0 - double(args.lr) * double(args.weight_decay));
      const T b1 = T(args.beta1), b2 = T(args.beta2), gs = T(args.grad_scale), eps = T(args.eps);
      const T one_minus_b1 = T(1.0 - double(args.beta1)), one_minus_b2 = T(1.0 - double(args.beta2));
      const T step_size = T(double(args.lr) / bias1), inv_sqrt_bias2 = T(1.0 / std::sqrt(bias2));
      const int64_t n = s.param.numel();
      simd_for(n, kParallelElements, [&](int64_t i) {
        const T gi = g[i] * gs;
        const T mi = b1 * m[i] + one_minus_b1 * gi;
        const T vi = b2 * v[i] + one_minus_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const T denom = std::sqrt(vi) * inv_sqrt_bias2 + eps;
        p[i] = p[i] * decay - step_size * mi / denom;
      });
    });
  }
}

void CpuBackend::sgd_step(std::vector<ParamSlots>& params, const SgdArgs& args) {
  const char* op = "sgd_step";
  const bool use_momentum = args.momentum != 0.0f;
  KILN_CHECK(!args.nesterov || use_momentum, op, ": nesterov needs a non-zero momentum");
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSlots& s = params[i];
    KILN_CHECK(s.param.defined(), op, ": parameter ", i, " is undefined");
    check_slot(op, i, s.param, "param", s.param);
    check_slot(op, i, s.grad, "grad", s.param);
    if (use_momentum) check_slot(op, i, s.m, "momentum buffer (m)", s.param);
  }
  for (ParamSlots& s : params) {
    dispatch_float(s.param.dtype(), op, [&]<typename T>() {
      T* p = s.param.data<T>();
      const T* g = s.grad.data<T>();
      T* buf = use_momentum ? s.m.data<T>() : nullptr;
      const T lr = T(args.lr), wd = T(args.weight_decay), mom = T(args.momentum), gs = T(args.grad_scale);
      const bool first = args.first_step, nesterov = args.nesterov;
      const int64_t n = s.param.numel();
      simd_for(n, kParallelElements, [&](int64_t i) {
        T d = g[i] * gs + wd * p[i];
        if (buf) {
          const T b = first ? d : mom * buf[i] + d;
          buf[i] = b;
          d = nesterov ? d + mom * b : b;
        }
        p[i] -= lr * d;
      });
    });
  }
}

}  // namespace kiln::cpu
