// Scaled dot-product attention over q, k, v [B, H, T, D] (contiguous), the
// unfused reference the CUDA flash kernel is checked against:
//   S = scale * Q K^T  (causal: S_ij = -inf for j > i),  P = softmax(S),  O = P V
// Forward saves lse_i = log sum_j exp(S_ij) per row, so backward recomputes P
// row by row as exp(S_ij - lse_i) without storing the T x T matrix.
//
// Backward, with Delta_i = sum_d dO_id O_id:
//   dP = dO V^T,  dS = P * (dP - Delta),  dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dO
//
// Forward rows are independent, so it runs parallel over (b, h, row).
// Backward accumulates dK and dV over rows, so it runs parallel over (b, h)
// with each head walked serially: no atomics, and a fixed summation order.
// Inner loops are plain and `omp simd` (BLAS must not be called inside an
// OpenMP region, and for T <= 256, D <= 64 the per-head GEMMs are tiny).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

namespace {

template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  T acc = T(0);
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

template <typename T>
inline void axpy(T alpha, const T* x, T* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void check_bhtd(const char* op, const Tensor& t, const char* what, const Tensor& q) {
  check_cpu(t, op);
  check_contiguous(t, op, what);
  KILN_CHECK(t.shape() == q.shape() && t.dtype() == q.dtype(), op, ": ", what, " is ", t.str(),
             " but q is ", q.str(), "; all of q, k, v and the outputs must match");
}

void check_lse(const char* op, const Tensor& lse, const Tensor& q) {
  check_cpu(lse, op);
  check_contiguous(lse, op, "lse");
  const Shape expected = {q.size(0), q.size(1), q.size(2)};
  KILN_CHECK(lse.shape() == expected && lse.dtype() == q.dtype(), op, ": lse must be ", shape_str(expected), " ",
             dtype_name(q.dtype()), ", got ", lse.str());
}

}  // namespace

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                           bool causal) {
  // bf16/f16: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&q, &k, &v, &out, &lse}))
    return in_f32([&](F32Staging& s) {
      attention(s.in(q), s.in(k), s.in(v), s.out(out), s.out(lse), scale, causal);
    });
  const char* op = "attention";
  check_cpu(q, op);
  check_contiguous(q, op, "q");
  KILN_CHECK(q.dim() == 4, op, ": q must be [B, H, T, D], got ", shape_str(q.shape()));
  check_bhtd(op, k, "k", q);
  check_bhtd(op, v, "v", q);
  check_bhtd(op, out, "out", q);
  check_lse(op, lse, q);
  const int64_t BH = q.size(0) * q.size(1), seq = q.size(2), D = q.size(3);
  const int64_t rows = BH * seq;

  dispatch_float(q.dtype(), op, [&]<typename T>() {
    const T* qp = q.data<T>();
    const T* kp = k.data<T>();
    const T* vp = v.data<T>();
    T* o_ptr = out.data<T>();
    T* lp = lse.data<T>();
    const T sc = T(scale);
#pragma omp parallel if (rows > 1 && rows * seq * D > 65536)
    {
      std::vector<T> s(size_t(std::max<int64_t>(seq, 1)));
#pragma omp for schedule(static)
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t bh = row / seq, i = row % seq;
        const T* qi = qp + row * D;
        const T* kh = kp + bh * seq * D;
        const T* vh = vp + bh * seq * D;
        const int64_t len = causal ? i + 1 : seq;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < len; ++j) {
          s[j] = sc * dot(qi, kh + j * D, D);
          mx = std::max(mx, s[j]);
        }
        // fast_exp (dispatch.h) in its own loop vectorises; libm's scalar expf
        // was ~5% of a GPT step. The sum keeps its order.
        for (int64_t j = 0; j < len; ++j) s[j] = fast_exp(s[j] - mx);
        double sum = 0.0;
        for (int64_t j = 0; j < len; ++j) sum += double(s[j]);
        T* oi = o_ptr + row * D;
        std::fill(oi, oi + D, T(0));
        for (int64_t j = 0; j < len; ++j) axpy(s[j], vh + j * D, oi, D);
        const T inv = T(1.0 / sum);
        for (int64_t d = 0; d < D; ++d) oi[d] *= inv;
        lp[row] = T(double(mx) + std::log(sum));
      }
    }
  });
}

void CpuBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv,
                                    float scale, bool causal) {
  // bf16/f16: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv}))
    return in_f32([&](F32Staging& s) {
      attention_backward(s.in(dout), s.in(q), s.in(k), s.in(v), s.in(out), s.in(lse), s.out(dq), s.out(dk),
                         s.out(dv), scale, causal);
    });
  const char* op = "attention_backward";
  check_cpu(q, op);
  check_contiguous(q, op, "q");
  KILN_CHECK(q.dim() == 4, op, ": q must be [B, H, T, D], got ", shape_str(q.shape()));
  check_bhtd(op, dout, "dout", q);
  check_bhtd(op, k, "k", q);
  check_bhtd(op, v, "v", q);
  check_bhtd(op, out, "out", q);
  check_bhtd(op, dq, "dq", q);
  check_bhtd(op, dk, "dk", q);
  check_bhtd(op, dv, "dv", q);
  check_lse(op, lse, q);
  const int64_t BH = q.size(0) * q.size(1), seq = q.size(2), D = q.size(3);

  dispatch_float(q.dtype(), op, [&]<typename T>() {
    const T* gp = dout.data<T>();
    const T* qp = q.data<T>();
    const T* kp = k.data<T>();
    const T* vp = v.data<T>();
    const T* o_ptr = out.data<T>();
    const T* lp = lse.data<T>();
    T* dqp = dq.data<T>();
    T* dkp = dk.data<T>();
    T* dvp = dv.data<T>();
    const T sc = T(scale);
#pragma omp parallel if (BH > 1 && BH * seq * seq * D > 65536)
    {
      std::vector<T> p(size_t(std::max<int64_t>(seq, 1))), ds(p.size());
#pragma omp for schedule(dynamic, 1)
      for (int64_t bh = 0; bh < BH; ++bh) {
        const int64_t base = bh * seq * D;
        const T* kh = kp + base;
        const T* vh = vp + base;
        T* dkh = dkp + base;
        T* dvh = dvp + base;
        std::fill(dkh, dkh + seq * D, T(0));
        std::fill(dvh, dvh + seq * D, T(0));
        for (int64_t i = 0; i < seq; ++i) {
          const int64_t row = bh * seq + i;
          const T* qi = qp + row * D;
          const T* gi = gp + row * D;
          const T delta = dot(gi, o_ptr + row * D, D);
          const T l = lp[row];
          const int64_t len = causal ? i + 1 : seq;
          for (int64_t j = 0; j < len; ++j) {
            p[j] = fast_exp(sc * dot(qi, kh + j * D, D) - l);
            ds[j] = p[j] * (dot(gi, vh + j * D, D) - delta);
          }
          T* dqi = dqp + row * D;
          std::fill(dqi, dqi + D, T(0));
          for (int64_t j = 0; j < len; ++j) {
            axpy(sc * ds[j], kh + j * D, dqi, D);
            axpy(sc * ds[j], qi, dkh + j * D, D);
            axpy(p[j], gi, dvh + j * D, D);
          }
        }
      }
    }
  });
}

}  // namespace kiln::cpu
