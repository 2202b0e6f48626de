// LayerNorm over the last dim of x [N, C], forward and fused backward; and
// RMSNorm's forward (its backward is composed of ops, kiln/autograd/ops_nn.cpp).
//
// Forward saves mean and rstd = 1/sqrt(var + eps) (biased variance, as
// PyTorch) so backward need not recompute the statistics. Statistics use two
// passes in double: the one-pass E[x^2]-E[x]^2 loses precision when |mean| is
// large compared with the spread.
//
// Backward writes (does not accumulate) dx, dweight and dbias:
//   xhat = (x - mean) * rstd,  g = dy * weight
//   dx   = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dweight = sum_n dy * xhat,  dbias = sum_n dy
// dx is parallel over rows. dweight/dbias are parallel over column blocks,
// each block summing rows in order (in double: N can be many thousands of
// tokens), so results do not depend on the thread count. A row's own sums
// are vectorised (in double), so their order depends on the vector width.
#include <algorithm>
#include <cmath>

#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kParallelElements = 32768;
constexpr int64_t kColumnBlock = 64;

void check_param(const char* op, const Tensor& t, const char* what, const Tensor& like, const Shape& shape) {
  check_cpu(t, op);
  check_contiguous(t, op, what);
  KILN_CHECK(t.shape() == shape, op, ": ", what, " must be ", shape_str(shape), ", got ", shape_str(t.shape()));
  KILN_CHECK(t.dtype() == like.dtype(), op, ": ", what, " is ", dtype_name(t.dtype()), " but x is ",
             dtype_name(like.dtype()));
}

template <typename T>
void layernorm_rows(const T* xp, const T* w, const T* b, T eps, T* yp, T* mp, T* rp, int64_t N, int64_t C) {
  for_chunks_if(N, N > 1 && N * C > kParallelElements, [&](int64_t first, int64_t last) {
    for (int64_t n = first; n < last; ++n) {
      const T* xr = xp + n * C;
      double sum = 0.0;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < C; ++c) sum += double(xr[c]);
      const double mu = sum / double(C);
      double sq = 0.0;
#pragma omp simd reduction(+ : sq)
      for (int64_t c = 0; c < C; ++c) {
        const double d = double(xr[c]) - mu;
        sq += d * d;
      }
      const double rs = 1.0 / std::sqrt(sq / double(C) + double(eps));
      mp[n] = T(mu);
      rp[n] = T(rs);
      const T m = T(mu), r = T(rs);
      T* yr = yp + n * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * r * w[c] + b[c];
    }
  });
}

// dweight and dbias, parallel over column blocks, each summing its rows in order.
template <typename T>
void layernorm_param_grads(const T* g, const T* xp, const T* mp, const T* rp, T* dwp, T* dbp, int64_t N, int64_t C) {
  const int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
  for_chunks_if(blocks, N * C > kParallelElements && blocks > 1, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      const int64_t c0 = blk * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
      double dw_acc[kColumnBlock] = {}, db_acc[kColumnBlock] = {};
      for (int64_t n = 0; n < N; ++n) {
        const T m = mp[n], r = rp[n];
        const T* xr = xp + n * C;
        const T* gr = g + n * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) {
          dw_acc[c - c0] += double(gr[c] * ((xr[c] - m) * r));
          db_acc[c - c0] += double(gr[c]);
        }
      }
      for (int64_t c = c0; c < c1; ++c) {
        dwp[c] = T(dw_acc[c - c0]);
        dbp[c] = T(db_acc[c - c0]);
      }
    }
  });
}

// dx, parallel over rows.
template <typename T>
void layernorm_input_grad(const T* g, const T* xp, const T* w, const T* mp, const T* rp, T* dxp, int64_t N,
                          int64_t C) {
  for_chunks_if(N, N > 1 && N * C > kParallelElements, [&](int64_t first, int64_t last) {
    for (int64_t n = first; n < last; ++n) {
      const T m = mp[n], r = rp[n];
      const T* xr = xp + n * C;
      const T* gr = g + n * C;
      double sum_g = 0.0, sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (int64_t c = 0; c < C; ++c) {
        const double gw = double(gr[c]) * double(w[c]);
        sum_g += gw;
        sum_gx += gw * (double(xr[c]) - double(m)) * double(r);
      }
      const T mean_g = T(sum_g / double(C)), mean_gx = T(sum_gx / double(C));
      T* dr = dxp + n * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const T xhat = (xr[c] - m) * r;
        dr[c] = r * (gr[c] * w[c] - mean_g - xhat * mean_gx);
      }
    }
  });
}

// RMSNorm's rows in T's compute type A (f32, f64 for f64), rounded to T
// where transformers rounds (backend.h).
template <typename T>
void rms_norm_rows(const T* x, const T* w, T* y, ComputeOf<T>* rstd, double eps, bool plus_one, int64_t N, int64_t C) {
  using A = ComputeOf<T>;
  for_chunks_if(N, N > 1 && N * C > kParallelElements, [&](int64_t first, int64_t last) {
    for (int64_t n = first; n < last; ++n) {
      const T* xr = x + n * C;
      double squares = 0.0;
#pragma omp simd reduction(+ : squares)
      for (int64_t c = 0; c < C; ++c) squares += to_double(xr[c]) * to_double(xr[c]);
      const A r = A(1.0 / std::sqrt(squares / double(C) + eps));
      rstd[n] = r;
      T* yr = y + n * C;
      auto normed = [&](int64_t c) { return A(to_double(xr[c])) * r; };
      auto weight = [&](int64_t c) { return A(to_double(w[c])); };
      // Two loops rather than a choice inside one: GCC 12 vectorises neither
      // arm of such a choice for f16.
      if (plus_one) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = from_double<T>(normed(c) * (1 + weight(c)));
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = from_double<T>(rounded<T>(normed(c)) * weight(c));
      }
    }
  });
}

}  // namespace

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, bool plus_one, Tensor& y, Tensor& rstd) {
  const char* op = "rms_norm";
  check_cpu(x, op);
  check_contiguous(x, op, "x");
  KILN_CHECK(x.dim() == 2, op, ": x must be [N, C], got ", shape_str(x.shape()));
  const int64_t N = x.size(0), C = x.size(1);
  KILN_CHECK(C > 0 || N == 0, op, ": x ", shape_str(x.shape()), " has no columns to normalise");
  check_param(op, weight, "weight", x, {C});
  check_param(op, y, "y", x, x.shape());
  check_cpu(rstd, op);
  check_contiguous(rstd, op, "rstd");
  const DType stats = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  KILN_CHECK(rstd.shape() == Shape{N} && rstd.dtype() == stats, op, ": rstd must be ", dtype_name(stats), " [", N,
             "], got ", dtype_name(rstd.dtype()), " ", shape_str(rstd.shape()));
  dispatch_compute(x.dtype(), op, [&]<typename T>() {
    rms_norm_rows(stored<const T>(x), stored<const T>(weight), stored<T>(y), rstd.data<ComputeOf<T>>(), double(eps),
                  plus_one, N, C);
  });
}

void CpuBackend::layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                           Tensor& mean, Tensor& rstd) {
  // bf16/f16: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&x, &weight, &bias, &y, &mean, &rstd}))
    return in_f32([&](F32Staging& s) {
      layernorm(s.in(x), s.in(weight), s.in(bias), eps, s.out(y), s.out(mean), s.out(rstd));
    });
  const char* op = "layernorm";
  check_cpu(x, op);
  check_contiguous(x, op, "x");
  KILN_CHECK(x.dim() == 2, op, ": x must be [N, C], got ", shape_str(x.shape()));
  const int64_t N = x.size(0), C = x.size(1);
  check_param(op, weight, "weight", x, {C});
  check_param(op, bias, "bias", x, {C});
  check_param(op, y, "y", x, x.shape());
  check_param(op, mean, "mean", x, {N});
  check_param(op, rstd, "rstd", x, {N});
  KILN_CHECK(C > 0 || N == 0, op, ": x ", shape_str(x.shape()), " has no columns to normalise");

  dispatch_float(x.dtype(), op, [&]<typename T>() {
    layernorm_rows(x.data<T>(), weight.data<T>(), bias.data<T>(), T(eps), y.data<T>(), mean.data<T>(),
                   rstd.data<T>(), N, C);
  });
}

void CpuBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                    const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  // bf16/f16: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias}))
    return in_f32([&](F32Staging& s) {
      layernorm_backward(s.in(dy), s.in(x), s.in(weight), s.in(mean), s.in(rstd), s.out(dx), s.out(dweight),
                         s.out(dbias));
    });
  const char* op = "layernorm_backward";
  check_cpu(x, op);
  check_contiguous(x, op, "x");
  KILN_CHECK(x.dim() == 2, op, ": x must be [N, C], got ", shape_str(x.shape()));
  const int64_t N = x.size(0), C = x.size(1);
  check_param(op, dy, "dy", x, x.shape());
  check_param(op, weight, "weight", x, {C});
  check_param(op, mean, "mean", x, {N});
  check_param(op, rstd, "rstd", x, {N});
  check_param(op, dx, "dx", x, x.shape());
  check_param(op, dweight, "dweight", x, {C});
  check_param(op, dbias, "dbias", x, {C});

  dispatch_float(x.dtype(), op, [&]<typename T>() {
    // Column sums first: dx may alias dy, so dy must be read before dx is written.
    layernorm_param_grads(dy.data<T>(), x.data<T>(), mean.data<T>(), rstd.data<T>(), dweight.data<T>(),
                          dbias.data<T>(), N, C);
    layernorm_input_grad(dy.data<T>(), x.data<T>(), weight.data<T>(), mean.data<T>(), rstd.data<T>(), dx.data<T>(),
                         N, C);
  });
}

}  // namespace kiln::cpu
