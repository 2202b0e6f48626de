#include "kiln/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include "kiln/core/error.h"
#ifdef KILN_HAVE_DNNL
#include <dnnl.h>
#endif

namespace kiln::cpu {

namespace {

// Below this many multiply-adds a product runs on one thread: waking the
// others costs more than it saves. Measured (kiln_bench --model matmul, 2
// threads): the MLP's 128x10x256 head (0.3M) ran at 9 GFLOP/s on two threads
// against 68 on one; 128x256x512 (17M) gains from the second thread.
constexpr double kParallelMacs = 4e6;

// Runs fn with OpenMP parallel regions limited to one thread when the product
// is small (oneDNN and OpenBLAS read the limit at each call).
template <typename Fn>
void sized(int64_t m, int64_t n, int64_t k, Fn&& fn) {
  const int threads = omp_get_max_threads();
  if (threads == 1 || double(m) * double(n) * double(k) >= kParallelMacs) return fn();
  struct Restore {
    int threads;
    ~Restore() { omp_set_num_threads(threads); }
  } restore{threads};
  omp_set_num_threads(1);
  fn();
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#ifdef KILN_HAVE_DNNL
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  KILN_CHECK(status == dnnl_success, "oneDNN sgemm failed (status ", int(status), ") for a ", m, "x", k, " @ ", k,
             "x", n, " product");
#else
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
#endif
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sized(m, n, k, [&] { sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  sized(m, n, k, [&] {
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
                alpha, a, lda, b, ldb, beta, c, ldc);
  });
}

const char* f32_gemm_library() {
#ifdef KILN_HAVE_DNNL
  return "oneDNN";
#else
  return "OpenBLAS";
#endif
}

}  // namespace kiln::cpu
