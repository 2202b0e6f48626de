// Scaled dot-product attention over q, k, v [B, H, T, D], the unfused
// reference the CUDA flash kernel is checked against:
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
// axpys instead were 20% of a GPT training step; GEMMs were measured faster,
// and causal heads skip most of the masked half (kCausalBlock). bf16 heads
// on AVX512-BF16 run Kiln's own kernels instead (attention_bf16.h).
//
// Every [B, H, T, D] operand may be any view whose rows (the last dim) are
// contiguous, so q, k and v can be read straight out of a packed [B, T, 3C]
// projection and their gradients written into one (the GEMMs take the row
// stride as their leading dimension): no head is gathered or scattered.

#include <algorithm>
#include <initializer_list>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/cpu/attention_bf16.h"
#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/gemm.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

namespace {

// C = alpha * op(A) @ op(B), overwriting C: f32/f64 operands as they are,
// bf16 ones (where the CPU multiplies bf16 natively) into an f32 C.
template <typename T>
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* a, int64_t lda, const T* b,
             int64_t ldb, T* c, int64_t ldc) {
  cpu::gemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, T(0), c, ldc);
}
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* a, int64_t lda,
             const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  gemm_bf16(ta, tb, M, N, K, alpha, a, lda, b, ldb, 0.0f, c, ldc);
}

// Row i of P or dS (its first len entries computed, the rest masked) made
// an operand of the second products, times `scale`: in place in f32, or
// rounded to bf16 into `low` (as flash attention rounds P and dS), in the
// same pass.
template <typename T>
void finish_row(T* row, T*, int64_t len, int64_t seq, T scale) {
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) row[j] *= scale;
  std::fill(row + len, row + seq, T(0));
}
void finish_row(const float* row, uint16_t* low, int64_t len, int64_t seq, float scale) {
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) low[j] = float_to_bf16(row[j] * scale);
  std::fill(low + len, low + seq, uint16_t(0));
}
// The matrix whose rows finish_row finished: m itself, or its bf16 copy.
template <typename T, typename In>
const In* finished(const T* m, const In* low) {
  if constexpr (std::is_same_v<T, In>) return m;
  else return low;
}

template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  T acc = T(0);
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}
inline float dot(const uint16_t* a, const uint16_t* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += bf16_to_float(a[i]) * bf16_to_float(b[i]);
  return acc;
}

void check_bhtd(const char* op, const Tensor& t, const char* what, const Tensor& q) {
  check_cpu(t, op);
  KILN_CHECK(t.dim() == 4 && t.shape() == q.shape() && t.dtype() == q.dtype(), op, ": ", what, " is ", t.str(),
             " but q is ", q.str(), "; all of q, k, v and the outputs must match, [B, H, T, D]");
  KILN_CHECK((t.strides()[3] == 1 || t.size(3) == 1) && (t.size(2) == 1 || t.strides()[2] >= t.size(3)), op, ": ",
             what, "'s rows must be contiguous and apart (strides ", shape_str(t.strides()),
             "); make it contiguous first");
}

// Head bh of a [B, H, T, D] view with contiguous rows: where it starts and
// how far apart its rows are.
template <typename T>
struct Head {
  T* p;
  int64_t ld;
};

template <typename T>
Head<T> head(const Tensor& t, int64_t bh) {
  const int64_t H = t.size(1);
  const int64_t offset = (bh / H) * t.strides()[0] + (bh % H) * t.strides()[1];
  const int64_t ld = t.size(2) == 1 ? t.size(3) : t.strides()[2];  // one row: any stride will do
  return {static_cast<T*>(const_cast<void*>(t.data_ptr())) + offset, ld};
}

// Head bh of a bf16 view as attention_bf16.h's kernels take it.
Bf16Rows bf16_rows(const Tensor& t, int64_t bh) {
  const Head<const uint16_t> h = head<const uint16_t>(t, bh);
  return {h.p, h.ld};
}

void check_lse(const char* op, const Tensor& lse, const Tensor& q) {
  check_cpu(lse, op);
  check_contiguous(lse, op, "lse");
  const Shape expected = {q.size(0), q.size(1), q.size(2)};
  // bf16 heads may keep their log-sum-exp in f32 (autocast does).
  const bool dtype_ok = lse.dtype() == q.dtype() || (q.dtype() == DType::bf16 && lse.dtype() == DType::f32);
  KILN_CHECK(lse.shape() == expected && dtype_ok, op, ": lse must be ", shape_str(expected), " ",
             dtype_name(q.dtype()), ", got ", lse.str());
}

}  // namespace

namespace {

// Causal heads skip the masked half of their products a block of rows at a
// time: rows [r0, r1) of S (and dP, and the rows of O and dQ) need keys
// [0, r1) only, and columns [c0, c1) of dK and dV need rows [c0, seq) of P
// and dS only. With 64-row blocks a 128-position head multiplies 3/4 of the
// full matrices (the masked entries of P and dS inside the blocks are
// zeros); smaller blocks pay more per product call than they save (GPT
// heads [16, 4, 128, 32] at 2 threads, bf16: 64 rows 0.84 / 1.37 ms forward
// / backward, 32 rows 0.89 / 1.60, whole heads 0.87 / 1.48). Non-causal
// heads are one block.
constexpr int64_t kCausalBlock = 64;

// A causal row i keeps i + 1 scores; its loops run on to the next multiple
// of kRowStep over scores set to -inf (exp gives 0) instead of ending in a
// scalar tail. The products wrote row i's scores up to the end of its row
// block, so the padding stays inside them. With the softmax's passes over
// all rows (attention_head) this took a GPT head's forward pass ([16, 4,
// 128, 32], bf16, 1 thread, best of 200) from 1.63 ms to 1.41 (the passes
// alone: 1.52); the backward pass is unchanged by either.
constexpr int64_t kRowStep = 16;

// Scores the loops of row i run over, and the scores the products wrote.
inline int64_t row_span(int64_t i, int64_t seq, bool causal) {
  if (!causal) return seq;
  const int64_t written = std::min(seq, (i / kCausalBlock + 1) * kCausalBlock);
  return std::min(written, (i + 1 + kRowStep - 1) / kRowStep * kRowStep);
}

// One head, forward: O = softmax(scale Q K^T) V and L = the rows' log-sum-exp,
// with S a [seq, seq] scratch. In is T, or bf16 with T = float (S16: P
// rounded to bf16, [seq, seq]; for f32 operands S itself).
template <typename T, typename In>
void attention_head(Head<const In> Q, Head<const In> K, Head<const In> V, Head<T> O, T* L,
                                     int64_t seq, int64_t D, T sc, bool causal, T* S, In* S16) {
  const int64_t block = causal ? kCausalBlock : seq;
  for (int64_t r0 = 0; r0 < seq; r0 += block) {  // S = scale Q K^T
    const int64_t r1 = std::min(seq, r0 + block);
    product(false, true, r1 - r0, causal ? r1 : seq, D, sc, Q.p + r0 * Q.ld, Q.ld, K.p, K.ld, S + r0 * seq, seq);
  }
  // The softmax a pass at a time over all rows rather than a row at a time:
  // each row's exps then overlap the next row's instead of waiting on its
  // max, and its sum on its exps (rows are short: 1 to seq scores).
  for (int64_t i = 0; i < seq; ++i) {
    T* si = S + i * seq;
    const int64_t len = causal ? i + 1 : seq, n = row_span(i, seq, causal);
    std::fill(si + len, si + n, -std::numeric_limits<T>::infinity());
    // The max skips NaN; a NaN score still makes the row NaN, through
    // si[j] - mx and the sum.
    T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < n; ++j) mx = si[j] > mx ? si[j] : mx;
    L[i] = mx;
  }
  for (int64_t i = 0; i < seq; ++i) {
    T* si = S + i * seq;
    const T mx = L[i];
    const int64_t n = row_span(i, seq, causal);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) si[j] = fast_exp(si[j] - mx);
  }
  for (int64_t i = 0; i < seq; ++i) {
    T* si = S + i * seq;
    const int64_t n = row_span(i, seq, causal);
    T sum = T(0);  // of at most seq terms in [0, 1], one of them 1
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) sum += si[j];
    finish_row(si, S16 + i * seq, n, seq, T(1) / sum);
    L[i] += std::log(sum);
  }
  const In* P = finished(S, S16);
  for (int64_t r0 = 0; r0 < seq; r0 += block) {  // O = P V
    const int64_t r1 = std::min(seq, r0 + block), keys = causal ? r1 : seq;
    product(false, false, r1 - r0, D, keys, T(1), P + r0 * seq, seq, V.p, V.ld, O.p + r0 * O.ld, O.ld);
  }
}

// One head, backward, with P and dS [seq, seq] scratch (and P16, dS16 for
// bf16 operands; for f32 ones P and dS again).
template <typename T, typename In>
void attention_head_backward(Head<const In> G, Head<const In> Q, Head<const In> K, Head<const In> V,
                                              Head<const In> O, const T* L, Head<T> dQ, Head<T> dK, Head<T> dV,
                                              int64_t seq, int64_t D, T sc, bool causal, T* P, T* dS, In* P16,
                                              In* dS16) {
  const int64_t block = causal ? kCausalBlock : seq;
  for (int64_t r0 = 0; r0 < seq; r0 += block) {
    const int64_t r1 = std::min(seq, r0 + block), keys = causal ? r1 : seq;
    product(false, true, r1 - r0, keys, D, sc, Q.p + r0 * Q.ld, Q.ld, K.p, K.ld, P + r0 * seq, seq);  // S = scale Q K^T
    product(false, true, r1 - r0, keys, D, T(1), G.p + r0 * G.ld, G.ld, V.p, V.ld, dS + r0 * seq, seq);  // dP = dO V^T
  }
  for (int64_t i = 0; i < seq; ++i) {
    const int64_t len = causal ? i + 1 : seq, n = row_span(i, seq, causal);
    const T delta = dot(G.p + i * G.ld, O.p + i * O.ld, D);
    T* pi = P + i * seq;
    T* dsi = dS + i * seq;
    std::fill(pi + len, pi + n, -std::numeric_limits<T>::infinity());  // P = 0, so dS = 0
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      pi[j] = fast_exp(pi[j] - L[i]);  // P = exp(S - lse)
      dsi[j] = pi[j] * (dsi[j] - delta);
    }
  }
  for (int64_t i = 0; i < seq; ++i) {
    const int64_t n = row_span(i, seq, causal);
    finish_row(P + i * seq, P16 + i * seq, n, seq, T(1));
    finish_row(dS + i * seq, dS16 + i * seq, n, seq, T(1));
  }
  const In* p = finished(P, P16);
  const In* ds = finished(dS, dS16);
  for (int64_t c0 = 0; c0 < seq; c0 += block) {
    const int64_t c1 = std::min(seq, c0 + block), first = causal ? c0 : 0, rows = seq - first;
    const In* p_cols = p + first * seq + c0;
    const In* ds_cols = ds + first * seq + c0;
    product(true, false, c1 - c0, D, rows, T(1), p_cols, seq, G.p + first * G.ld, G.ld, dV.p + c0 * dV.ld,
            dV.ld);  // dV = P^T dO
    product(true, false, c1 - c0, D, rows, sc, ds_cols, seq, Q.p + first * Q.ld, Q.ld, dK.p + c0 * dK.ld,
            dK.ld);  // dK = scale dS^T Q
  }
  for (int64_t r0 = 0; r0 < seq; r0 += block) {  // dQ = scale dS K
    const int64_t r1 = std::min(seq, r0 + block), keys = causal ? r1 : seq;
    product(false, false, r1 - r0, D, keys, sc, ds + r0 * seq, seq, K.p, K.ld, dQ.p + r0 * dQ.ld, dQ.ld);
  }
}

// bf16 heads: where the CPU multiplies bf16 natively, the products read the
// bf16 heads as they are and write f32; elsewhere each head's operands are
// widened into f32 and the f32 head run. Either way a head's outputs are
// formed in per-thread f32 buffers (these) and rounded back once.
struct HeadBuffers {
  std::vector<float> data;
  std::vector<float*> parts;
  HeadBuffers(std::initializer_list<int64_t> sizes) {
    int64_t total = 0;
    for (int64_t n : sizes) total += n;
    data.resize(size_t(total));
    float* p = data.data();
    for (int64_t n : sizes) {
      parts.push_back(p);
      p += n;
    }
  }
};

// Head bh of a bf16 view into a contiguous [seq, D] f32 buffer, and back.
float* read_head(const Tensor& t, int64_t bh, float* to) {
  const Head<const uint16_t> h = head<const uint16_t>(t, bh);
  const int64_t seq = t.size(2), D = t.size(3);
  if (h.ld == D) bf16_to_f32(h.p, to, seq * D);
  else
    for (int64_t i = 0; i < seq; ++i) bf16_to_f32(h.p + i * h.ld, to + i * D, D);
  return to;
}
void write_head(const float* from, int64_t bh, Tensor& t) {
  const Head<uint16_t> h = head<uint16_t>(t, bh);
  const int64_t seq = t.size(2), D = t.size(3);
  if (h.ld == D) return f32_to_bf16(from, h.p, seq * D);
  for (int64_t i = 0; i < seq; ++i) f32_to_bf16(from + i * D, h.p + i * h.ld, D);
}

// Rows [first, first + n) of a bf16 or f32 log-sum-exp, in f32 and back.
void read_rows(const Tensor& lse, int64_t first, int64_t n, float* to) {
  if (lse.dtype() == DType::f32) return void(std::copy_n(lse.data<float>() + first, n, to));
  bf16_to_f32(bits16(lse) + first, to, n);
}
void write_rows(const float* from, int64_t first, int64_t n, Tensor& lse) {
  if (lse.dtype() == DType::f32) return void(std::copy_n(from, n, lse.data<float>() + first));
  f32_to_bf16(from, bits16(lse) + first, n);
}

// A thread's state for the bf16 kernels: their scratch, and a head's
// log-sum-exp rows in f32.
std::pair<Bf16AttentionScratch, std::vector<float>> kernel_scratch(int64_t seq) {
  return {Bf16AttentionScratch(), std::vector<float>(size_t(seq))};
}

// Runs body(scratch, bh) for each head bh of q's [B, H, seq, D], in parallel
// over the heads where there is enough work; each thread makes its scratch
// (buffers reused across its heads) once, with make_scratch().
template <typename MakeScratch, typename Body>
void for_each_head(const Tensor& q, MakeScratch make_scratch, Body body) {
  const int64_t BH = q.size(0) * q.size(1), seq = q.size(2), D = q.size(3);
#pragma omp parallel if (BH > 1 && BH * seq * seq * D > 65536)
  {
    auto scratch = make_scratch();
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < BH; ++bh) simd_kernel([&] { body(scratch, bh); });
  }
}

}  // namespace

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                           bool causal) {
  const bool bf16 = q.dtype() == DType::bf16;
  // f16: run the f32 kernel on staged copies (low_precision.h).
  if (!bf16 && any_low_precision({&q, &k, &v, &out, &lse}))
    return in_f32([&](F32Staging& s) {
      attention(s.in(q), s.in(k), s.in(v), s.out(out), s.out(lse), scale, causal);
    });
  const char* op = "attention";
  check_bhtd(op, q, "q", q);
  check_bhtd(op, k, "k", q);
  check_bhtd(op, v, "v", q);
  check_bhtd(op, out, "out", q);
  check_lse(op, lse, q);
  const int64_t seq = q.size(2), D = q.size(3), HD = seq * D;

  if (bf16 && bf16_gemm_available() && bf16_attention_kernels_apply(D))  // attention_bf16.h
    return for_each_head(
        q, [&] { return kernel_scratch(seq); },
        [&](auto& scratch, int64_t bh) {
          auto& [kernels, rows] = scratch;
          const Head<uint16_t> ho = head<uint16_t>(out, bh);
          bf16_attention_head(bf16_rows(q, bh), bf16_rows(k, bh), bf16_rows(v, bh), ho.p, ho.ld, rows.data(), seq, D,
                              scale, causal, kernels);
          write_rows(rows.data(), bh * seq, seq, lse);
        });
  if (bf16 && bf16_gemm_available())  // the products read the bf16 heads as they are
    return for_each_head(
        q, [&] { return std::pair(HeadBuffers({HD, seq, seq * seq}), std::vector<uint16_t>(size_t(seq * seq))); },
        [&](auto& scratch, int64_t bh) {
          const std::vector<float*>& b = scratch.first.parts;
          attention_head<float, uint16_t>(head<const uint16_t>(q, bh), head<const uint16_t>(k, bh),
                                          head<const uint16_t>(v, bh), {b[0], D}, b[1], seq, D, scale, causal, b[2],
                                          scratch.second.data());
          write_head(b[0], bh, out);
          write_rows(b[1], bh * seq, seq, lse);
        });
  if (bf16)  // each head widened to f32
    return for_each_head(
        q, [&] { return HeadBuffers({HD, HD, HD, HD, seq, seq * seq}); },
        [&](HeadBuffers& buf, int64_t bh) {
          const std::vector<float*>& b = buf.parts;
          attention_head<float, float>({read_head(q, bh, b[0]), D}, {read_head(k, bh, b[1]), D},
                                       {read_head(v, bh, b[2]), D}, {b[3], D}, b[4], seq, D, scale, causal, b[5],
                                       b[5]);
          write_head(b[3], bh, out);
          write_rows(b[4], bh * seq, seq, lse);
        });
  dispatch_float(q.dtype(), op, [&]<typename T>() {
    T* lp = lse.data<T>();
    for_each_head(
        q, [&] { return std::vector<T>(size_t(seq * seq)); },
        [&](std::vector<T>& scores, int64_t bh) {
          attention_head<T, T>(head<const T>(q, bh), head<const T>(k, bh), head<const T>(v, bh), head<T>(out, bh),
                               lp + bh * seq, seq, D, T(scale), causal, scores.data(), scores.data());
        });
  });
}

void CpuBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv,
                                    float scale, bool causal) {
  const bool bf16 = q.dtype() == DType::bf16;
  // f16: run the f32 kernel on staged copies (low_precision.h).
  if (!bf16 && any_low_precision({&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv}))
    return in_f32([&](F32Staging& s) {
      attention_backward(s.in(dout), s.in(q), s.in(k), s.in(v), s.in(out), s.in(lse), s.out(dq), s.out(dk),
                         s.out(dv), scale, causal);
    });
  const char* op = "attention_backward";
  check_bhtd(op, q, "q", q);
  check_bhtd(op, dout, "dout", q);
  check_bhtd(op, k, "k", q);
  check_bhtd(op, v, "v", q);
  check_bhtd(op, out, "out", q);
  check_bhtd(op, dq, "dq", q);
  check_bhtd(op, dk, "dk", q);
  check_bhtd(op, dv, "dv", q);
  check_lse(op, lse, q);
  const int64_t seq = q.size(2), D = q.size(3), HD = seq * D;

  if (bf16 && bf16_gemm_available() && bf16_attention_kernels_apply(D))  // attention_bf16.h
    return for_each_head(
        q, [&] { return kernel_scratch(seq); },
        [&](auto& scratch, int64_t bh) {
          auto& [kernels, rows] = scratch;
          read_rows(lse, bh * seq, seq, rows.data());
          const Head<uint16_t> gq = head<uint16_t>(dq, bh), gk = head<uint16_t>(dk, bh), gv = head<uint16_t>(dv, bh);
          bf16_attention_head_backward(bf16_rows(dout, bh), bf16_rows(q, bh), bf16_rows(k, bh), bf16_rows(v, bh),
                                       bf16_rows(out, bh), rows.data(), {gq.p, gk.p, gv.p, gq.ld, gk.ld, gv.ld}, seq,
                                       D, scale, causal, kernels);
        });
  if (bf16 && bf16_gemm_available())  // the products read the bf16 heads as they are
    return for_each_head(
        q,
        [&] {
          return std::pair(HeadBuffers({seq, HD, HD, HD, seq * seq, seq * seq}),
                           std::vector<uint16_t>(size_t(2 * seq * seq)));
        },
        [&](auto& scratch, int64_t bh) {
          const std::vector<float*>& b = scratch.first.parts;
          uint16_t* p16 = scratch.second.data();
          read_rows(lse, bh * seq, seq, b[0]);
          attention_head_backward<float, uint16_t>(
              head<const uint16_t>(dout, bh), head<const uint16_t>(q, bh), head<const uint16_t>(k, bh),
              head<const uint16_t>(v, bh), head<const uint16_t>(out, bh), b[0], {b[1], D}, {b[2], D}, {b[3], D}, seq,
              D, scale, causal, b[4], b[5], p16, p16 + seq * seq);
          write_head(b[1], bh, dq);
          write_head(b[2], bh, dk);
          write_head(b[3], bh, dv);
        });
  if (bf16)  // each head widened to f32
    return for_each_head(
        q, [&] { return HeadBuffers({HD, HD, HD, HD, HD, seq, HD, HD, HD, seq * seq, seq * seq}); },
        [&](HeadBuffers& buf, int64_t bh) {
          const std::vector<float*>& b = buf.parts;
          read_rows(lse, bh * seq, seq, b[5]);
          attention_head_backward<float, float>({read_head(dout, bh, b[0]), D}, {read_head(q, bh, b[1]), D},
                                                {read_head(k, bh, b[2]), D}, {read_head(v, bh, b[3]), D},
                                                {read_head(out, bh, b[4]), D}, b[5], {b[6], D}, {b[7], D}, {b[8], D},
                                                seq, D, scale, causal, b[9], b[10], b[9], b[10]);
          write_head(b[6], bh, dq);
          write_head(b[7], bh, dk);
          write_head(b[8], bh, dv);
        });
  dispatch_float(q.dtype(), op, [&]<typename T>() {
    const T* lp = lse.data<T>();
    for_each_head(
        q, [&] { return std::vector<T>(size_t(2 * seq * seq)); },
        [&](std::vector<T>& buf, int64_t bh) {
          T* p = buf.data();
          T* dp = p + seq * seq;
          attention_head_backward<T, T>(head<const T>(dout, bh), head<const T>(q, bh), head<const T>(k, bh),
                                        head<const T>(v, bh), head<const T>(out, bh), lp + bh * seq, head<T>(dq, bh),
                                        head<T>(dk, bh), head<T>(dv, bh), seq, D, T(scale), causal, p, dp, p, dp);
        });
  });
}

}  // namespace kiln::cpu
