// Helpers shared by the CPU nn-op tests (tests/test_cpu_nn_ops*.cpp): random
// inputs, NaN-poisoned outputs, raw reads, tolerance checks and central
// finite differences over f64 tensors.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/backend/backend.h"

namespace kiln::test_nn {

inline Backend& cpu() { return backend_for(Device::cpu()); }

inline std::vector<double> random_values(int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = dist(rng);
  return v;
}

template <typename T>
Tensor make(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from_vector<T>(std::vector<T>(values.begin(), values.end()), shape);
}

template <typename T>
std::vector<double> read(const Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<double>(p, p + t.numel());
}

// Outputs start as NaN so an element the op forgets to write is caught.
inline Tensor poisoned(const Shape& shape, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, dtype);
  if (dtype == DType::f32) std::fill_n(t.data<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
  if (dtype == DType::f64) std::fill_n(t.data<double>(), t.numel(), std::numeric_limits<double>::quiet_NaN());
  return t;
}

inline void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected,
                            double atol, double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], atol + rtol * std::abs(expected[i])) << what << " at element " << i;
}

// Central differences of the scalar f(x) over every element of x (f64).
inline std::vector<double> finite_diff(Tensor& x, const std::function<double()>& f, double h = 1e-6) {
  double* p = x.data<double>();
  std::vector<double> g(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double saved = p[i];
    p[i] = saved + h;
    const double up = f();
    p[i] = saved - h;
    const double down = f();
    p[i] = saved;
    g[size_t(i)] = (up - down) / (2 * h);
  }
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace kiln::test_nn
