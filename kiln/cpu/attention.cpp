// Scaled dot-product attention over q, k, v [B, H, T, D] (contiguous), the
// unfused reference the CUDA flash kernel is checked against:
//   S = scale * Q K^T  (causal: S_ij = -inf for j > i),  P = softmax(S),  O = P V
// Forward saves lse_i = log sum_j exp(S_ij) per row, so backward recomputes P
// as exp(S_ij - lse_i) instead of keeping it from the forward pass.
//
// Backward, with Delta_i = sum_d dO_id O_id:
//   dP = dO V^T,  dS = P * (dP - Delta),  dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dO
//
// Both passes run parallel over heads (b, h); each head is a handful of
// single-threaded GEMMs on a T x T scratch matrix (oneDNN and OpenBLAS both
// run single-threaded inside a parallel region). Per-row dot products and
// axpys instead were 20% of a GPT training step; GEMMs were measured faster
// even though causal heads compute the masked half too.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/gemm.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

namespace {

// C = alpha * op(A) @ op(B), overwriting C.
template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T* c, int64_t ldc) {
  cpu::gemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, T(0), c, ldc);
}

template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  T acc = T(0);
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
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
#pragma omp parallel if (BH > 1 && rows * seq * D > 65536)
    {
      std::vector<T> scores(size_t(seq * seq));
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < BH; ++bh) {
        const int64_t base = bh * seq * D;
        T* S = scores.data();
        gemm<T>(false, true, seq, seq, D, sc, qp + base, D, kp + base, D, S, seq);  // S = scale Q K^T
        for (int64_t i = 0; i < seq; ++i) {
          T* si = S + i * seq;
          const int64_t len = causal ? i + 1 : seq;
          T mx = -std::numeric_limits<T>::infinity();
          for (int64_t j = 0; j < len; ++j) mx = max_nan(mx, si[j]);  // a NaN score makes the row NaN
          // fast_exp (dispatch.h) in its own loop vectorises; the sum keeps its order.
          for (int64_t j = 0; j < len; ++j) si[j] = fast_exp(si[j] - mx);
          double sum = 0.0;
          for (int64_t j = 0; j < len; ++j) sum += double(si[j]);
          const T inv = T(1.0 / sum);
          for (int64_t j = 0; j < len; ++j) si[j] *= inv;
          std::fill(si + len, si + seq, T(0));
          lp[bh * seq + i] = T(double(mx) + std::log(sum));
        }
        gemm<T>(false, false, seq, D, seq, T(1), S, seq, vp + base, D, o_ptr + base, D);  // O = P V
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
      std::vector<T> p_buf(size_t(seq * seq)), dp_buf(p_buf.size());
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < BH; ++bh) {
        const int64_t base = bh * seq * D;
        const T* Q = qp + base;
        const T* K = kp + base;
        const T* G = gp + base;
        T* P = p_buf.data();
        T* dS = dp_buf.data();
        gemm<T>(false, true, seq, seq, D, sc, Q, D, K, D, P, seq);          // S = scale Q K^T
        gemm<T>(false, true, seq, seq, D, T(1), G, D, vp + base, D, dS, seq);  // dP = dO V^T
        for (int64_t i = 0; i < seq; ++i) {
          const int64_t row = bh * seq + i, len = causal ? i + 1 : seq;
          const T delta = dot(G + i * D, o_ptr + row * D, D);
          const T l = lp[row];
          T* pi = P + i * seq;
          T* dsi = dS + i * seq;
          for (int64_t j = 0; j < len; ++j) pi[j] = fast_exp(pi[j] - l);  // P = exp(S - lse)
          for (int64_t j = 0; j < len; ++j) dsi[j] = pi[j] * (dsi[j] - delta);
          std::fill(pi + len, pi + seq, T(0));
          std::fill(dsi + len, dsi + seq, T(0));
        }
        gemm<T>(true, false, seq, D, seq, T(1), P, seq, G, D, dvp + base, D);  // dV = P^T dO
        gemm<T>(false, false, seq, D, seq, sc, dS, seq, K, D, dqp + base, D);  // dQ = scale dS K
        gemm<T>(true, false, seq, D, seq, sc, dS, seq, Q, D, dkp + base, D);   // dK = scale dS^T Q
      }
    }
  });
}

}  // namespace kiln::cpu
