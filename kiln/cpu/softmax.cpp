// Softmax and log-softmax over the last dimension, and their backward.
//
// Forward subtracts the row max before exponentiating so large logits do not
// overflow. Row sums accumulate in double: this backend is the reference the
// CUDA kernels are checked against, so it should be the more accurate side.
// Each row is reduced in a fixed order, so results do not depend on threads.
#include <cmath>
#include <limits>
#include <type_traits>

#include "kiln/core/fast_exp.h"
#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

namespace {

// Rows below this many elements in total run on one thread.
constexpr int64_t kParallelElements = 32768;

void check_rowwise(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  check_cpu(a, op);
  check_cpu(b, op);
  check_contiguous(a, op, a_name);
  check_contiguous(b, op, b_name);
  KILN_CHECK(a.shape() == b.shape(), op, ": ", a_name, " ", shape_str(a.shape()), " and ", b_name, " ",
             shape_str(b.shape()), " must have the same shape");
  KILN_CHECK(a.dtype() == b.dtype(), op, ": ", a_name, " is ", dtype_name(a.dtype()), " but ", b_name, " is ",
             dtype_name(b.dtype()));
  KILN_CHECK(a.dim() >= 1, op, ": needs at least one dimension, got a scalar");
}

// The row's largest value, or NaN if it holds one (a NaN makes the whole
// row NaN). In lanes, NaN kept aside: max_nan's branch would not vectorise.
template <typename T>
T row_max(const T* x, int64_t C) {
  T most = x[0];
  int nans = 0;
#pragma omp simd reduction(max : most) reduction(| : nans)
  for (int64_t j = 0; j < C; ++j) {
    most = x[j] > most ? x[j] : most;
    nans |= x[j] != x[j];
  }
  return nans ? std::numeric_limits<T>::quiet_NaN() : most;
}

// The sum of a row in double, in lanes (a fixed order for a given build, so
// results still do not depend on threads).
template <typename T>
double row_sum(const T* x, int64_t C) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < C; ++j) sum += double(x[j]);
  return sum;
}

}  // namespace

void CpuBackend::softmax(const Tensor& x, Tensor& out, bool log) {
  // bf16/f16: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&x, &out})) return in_f32([&](F32Staging& s) { softmax(s.in(x), s.out(out), log); });
  check_rowwise("softmax", x, "x", out, "out");
  const int64_t C = x.size(-1);
  const int64_t rows = C == 0 ? 0 : x.numel() / C;
  dispatch_float(x.dtype(), "softmax", [&]<typename T>() {
    const T* xp = x.data<T>();
    T* yp = out.data<T>();
    for_each_if(rows, rows > 1 && rows * C > kParallelElements, [&](int64_t r) {
      const T* xr = xp + r * C;
      T* yr = yp + r * C;
      const T mx = row_max(xr, C);
      // exp(x - max): f32 by fast_exp in a loop of its own, so that it vectorises (libm's scalar expf was a
      // third of an encoder's attention); the sum then in double.
      auto exp_of = [](T v) {
        if constexpr (std::is_same_v<T, float>) return fast_exp(v);
        else return std::exp(v);
      };
      if (log) {
        double sum = 0.0;
        for (int64_t j = 0; j < C; ++j) sum += double(exp_of(xr[j] - mx));
        const T shift = mx + T(std::log(sum));
        for (int64_t j = 0; j < C; ++j) yr[j] = xr[j] - shift;
      } else {
        // out may alias x: each element is read before it is overwritten.
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) yr[j] = exp_of(xr[j] - mx);
        const double sum = row_sum(yr, C);
        const T inv = T(1.0 / sum);
        for (int64_t j = 0; j < C; ++j) yr[j] *= inv;
      }
    });
  });
}

// softmax:     dx = y * (dy - sum(dy * y))
// log-softmax: dx = dy - exp(y) * sum(dy)
void CpuBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  // bf16/f16: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&y, &dy, &dx}))
    return in_f32([&](F32Staging& s) { softmax_backward(s.in(y), s.in(dy), s.out(dx), log); });
  check_rowwise("softmax_backward", y, "y", dy, "dy");
  check_rowwise("softmax_backward", y, "y", dx, "dx");
  const int64_t C = y.size(-1);
  const int64_t rows = C == 0 ? 0 : y.numel() / C;
  dispatch_float(y.dtype(), "softmax_backward", [&]<typename T>() {
    const T* yp = y.data<T>();
    const T* gp = dy.data<T>();
    T* dp = dx.data<T>();
    for_each_if(rows, rows > 1 && rows * C > kParallelElements, [&](int64_t r) {
      const T* yr = yp + r * C;
      const T* gr = gp + r * C;
      T* dr = dp + r * C;
      double acc = 0.0;
      if (log) {
        for (int64_t j = 0; j < C; ++j) acc += double(gr[j]);
        const T s = T(acc);
        for (int64_t j = 0; j < C; ++j) dr[j] = gr[j] - std::exp(yr[j]) * s;
      } else {
        for (int64_t j = 0; j < C; ++j) acc += double(gr[j]) * double(yr[j]);
        const T s = T(acc);
        for (int64_t j = 0; j < C; ++j) dr[j] = yr[j] * (gr[j] - s);
      }
    });
  });
}

}  // namespace kiln::cpu
