#include "kiln/cpu/gemm.h"

#include <cblas.h>

#include "kiln/core/error.h"
#ifdef KILN_HAVE_DNNL
#include <dnnl.h>
#endif

namespace kiln::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
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

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

const char* f32_gemm_library() {
#ifdef KILN_HAVE_DNNL
  return "oneDNN";
#else
  return "OpenBLAS";
#endif
}

}  // namespace kiln::cpu
