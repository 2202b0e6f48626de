// Fused cross-entropy: per-row loss and, optionally, dlogits in one pass.
//
//   loss_n    = logsumexp(logits_n) - logits_n[target_n]
//   dlogits_n = (softmax(logits_n) - onehot(target_n)) * scale
//
// Fusing means the softmax is never materialised, and dlogits may overwrite
// the logits in place (the target logit is read before the row is written),
// which saves the largest activation of a language model. Rows whose target
// equals ignore_index get loss 0 and a zero gradient.
//
// Targets are validated on one thread before the parallel loop, because an
// exception must not escape an OpenMP region.
#include <cmath>
#include <limits>

#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kParallelElements = 32768;

void check_targets(const Tensor& targets, int64_t N, int64_t C, int64_t ignore_index) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = load_index(targets, n);
    if (t == ignore_index) continue;
    KILN_CHECK(t >= 0 && t < C, "cross_entropy: target ", t, " at row ", n, " is outside [0, ", C,
               ") for logits with C = ", C, " classes (ignore_index is ", ignore_index, ")");
  }
}

template <typename T, typename L>
void cross_entropy_rows(const T* logits, const Tensor& targets, L* losses, T* dlogits, T scale, int64_t N, int64_t C,
                        int64_t ignore_index) {
  for_chunks_if(N, N > 1 && N * C > kParallelElements, [&](int64_t first, int64_t last) {
    for (int64_t n = first; n < last; ++n) {
      const T* x = logits + n * C;
      const int64_t t = load_index(targets, n);
      if (t == ignore_index) {
        losses[n] = L(0);
        if (dlogits)
          for (int64_t j = 0; j < C; ++j) dlogits[n * C + j] = T(0);
        continue;
      }
      // Both reductions vectorise (they were scalar, 16% of a GPT step). The
      // max skips NaN; a NaN logit still makes the loss and the whole row's
      // gradient NaN, through x[j] - mx in the sum and x[j] - lse below.
      T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t j = 0; j < C; ++j) mx = x[j] > mx ? x[j] : mx;
      // fast_exp (dispatch.h): libm's scalar expf was ~5% of a GPT step here.
      double sum = 0.0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < C; ++j) sum += double(fast_exp(x[j] - mx));
      const double lse = double(mx) + std::log(sum);
      losses[n] = L(lse - double(x[t]));  // read x[t] before dlogits may overwrite it
      if (dlogits) {
        T* d = dlogits + n * C;
        const T shift = T(lse);
        for (int64_t j = 0; j < C; ++j) d[j] = fast_exp(x[j] - shift) * scale;
        d[t] -= scale;
      }
    }
  });
}

}  // namespace

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& dlogits,
                               float dlogits_scale, int64_t ignore_index) {
  KILN_CHECK(!dlogits.defined() || dlogits.dtype() == logits.dtype() ||
                 (logits.dtype() == DType::f32 && (dlogits.dtype() == DType::bf16 || dlogits.dtype() == DType::f16)),
             "cross_entropy: dlogits must be ", dtype_name(logits.dtype()),
             logits.dtype() == DType::f32 ? ", bf16 or f16" : "", ", got ", dtype_name(dlogits.dtype()));
  // bf16/f16: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&logits, &losses, &dlogits}))
    return in_f32([&](F32Staging& s) {
      cross_entropy(s.in(logits), targets, s.out(losses), s.out(dlogits), dlogits_scale, ignore_index);
    });
  const char* op = "cross_entropy";
  check_cpu(logits, op);
  check_cpu(targets, op);
  check_cpu(losses, op);
  check_contiguous(logits, op, "logits");
  check_contiguous(targets, op, "targets");
  check_contiguous(losses, op, "losses");
  KILN_CHECK(logits.dim() == 2, op, ": logits must be [N, C], got ", shape_str(logits.shape()));
  const int64_t N = logits.size(0), C = logits.size(1);
  KILN_CHECK(targets.dim() == 1 && targets.size(0) == N, op, ": targets must be [", N, "] for logits ",
             shape_str(logits.shape()), ", got ", shape_str(targets.shape()));
  KILN_CHECK(targets.dtype() == DType::i32 || targets.dtype() == DType::i64, op,
             ": targets must be i32 or i64, got ", dtype_name(targets.dtype()));
  KILN_CHECK(losses.dim() == 1 && losses.size(0) == N, op, ": losses must be [", N, "], got ",
             shape_str(losses.shape()));
  KILN_CHECK(losses.dtype() == DType::f32 || losses.dtype() == logits.dtype(), op, ": losses must be f32 or ",
             dtype_name(logits.dtype()), ", got ", dtype_name(losses.dtype()));
  if (dlogits.defined()) {
    check_cpu(dlogits, op);
    check_contiguous(dlogits, op, "dlogits");
    KILN_CHECK(dlogits.shape() == logits.shape() && dlogits.dtype() == logits.dtype(), op, ": dlogits ",
               dlogits.str(), " must match logits ", logits.str());
  }
  if (N == 0) return;
  KILN_CHECK(C > 0, op, ": logits ", shape_str(logits.shape()), " have no classes");
  check_targets(targets, N, C, ignore_index);

  dispatch_float(logits.dtype(), op, [&]<typename T>() {
    T* d = dlogits.defined() ? dlogits.data<T>() : nullptr;
    if (losses.dtype() == DType::f32)
      cross_entropy_rows(logits.data<T>(), targets, losses.data<float>(), d, T(dlogits_scale), N, C, ignore_index);
    else
      cross_entropy_rows(logits.data<T>(), targets, losses.data<T>(), d, T(dlogits_scale), N, C, ignore_index);
  });
}

}  // namespace kiln::cpu
