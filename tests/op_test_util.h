// Shared helpers for op tests: random tensors, non-contiguous copies, and a
// float64 finite-difference gradient check.
#pragma once
#include <gtest/gtest.h>

#include <functional>

#include "kiln/autograd/ops.h"

namespace kiln::testing {

inline Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::f64, double lo = -1.0,
                            double hi = 1.0) {
  Generator gen(seed);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = lo + (hi - lo) * gen.uniform();
  return to_dtype(Tensor::from_vector(v, shape), dtype);
}

// Same values, but every dim strided (a step-2 slice of a wider buffer).
inline Tensor noncontiguous(const Tensor& t) {
  if (t.dim() == 0) return t;
  Shape wide = t.shape();
  wide.back() *= 2;
  Tensor buf = zeros(wide, t.dtype(), t.device());
  Tensor view = slice(buf, -1, 0, wide.back(), 2);
  copy_into(t, view);
  return view;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(shape_str(a.shape()), shape_str(b.shape()));
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks d(sum(f(inputs) * r))/d(input) against central differences, in f64.
// `differentiable` marks which inputs get a gradient.
inline void gradcheck(const OpFn& f, std::vector<Tensor> inputs, std::vector<bool> differentiable = {},
                      double eps = 1e-6, double tol = 1e-5) {
  if (differentiable.empty()) differentiable.assign(inputs.size(), true);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (differentiable[i]) inputs[i].set_requires_grad(true);
  Tensor out = f(inputs);
  Tensor r = random_tensor(out.shape(), 999, out.dtype());
  Tensor loss = sum(mul(out, r));
  loss.backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!differentiable[i]) continue;
    Tensor& x = inputs[i];
    ASSERT_TRUE(x.grad().defined()) << "input " << i << " got no gradient";
    std::vector<double> analytic = x.grad().to_vector<double>();
    ASSERT_EQ(int64_t(analytic.size()), x.numel());
    // Perturb through a contiguous copy and write back via a strided copy.
    for (int64_t j = 0; j < x.numel(); ++j) {
      auto eval = [&](double delta) {
        NoGradGuard ng;
        Tensor flat = copy_to(x, Device::cpu(), DType::f64);
        flat.data<double>()[j] += delta;
        std::vector<Tensor> args = inputs;
        Tensor moved = Tensor::empty(x.shape(), x.dtype(), x.device());
        copy_into(flat, moved);
        args[i] = moved;
        return sum(mul(f(args), r)).item();
      };
      double numeric = (eval(eps) - eval(-eps)) / (2 * eps);
      double scale = std::max(1.0, std::abs(numeric));
      ASSERT_NEAR(analytic[size_t(j)], numeric, tol * scale)
          << "input " << i << " element " << j;
    }
  }
}

// Runs f on f64 inputs and on the same inputs cast to f32 (also strided),
// and checks the f32 result against the f64 reference.
inline void check_forward_f32_vs_f64(const OpFn& f, const std::vector<Tensor>& inputs_f64, double tol = 1e-5,
                                     std::vector<bool> is_index = {}) {
  if (is_index.empty()) is_index.assign(inputs_f64.size(), false);
  NoGradGuard ng;
  Tensor ref = f(inputs_f64);
  for (bool strided : {false, true}) {
    std::vector<Tensor> in32;
    for (size_t i = 0; i < inputs_f64.size(); ++i) {
      Tensor t = is_index[i] ? inputs_f64[i] : to_dtype(inputs_f64[i], DType::f32);
      in32.push_back(strided && !is_index[i] ? noncontiguous(t) : t);
    }
    Tensor got = f(in32);
    double scale = 1.0;
    for (double v : ref.to_vector<double>()) scale = std::max(scale, std::abs(v));
    EXPECT_LT(max_abs_diff(got, ref), tol * scale) << (strided ? "strided inputs" : "contiguous inputs");
  }
}

}  // namespace kiln::testing
