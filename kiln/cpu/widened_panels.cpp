#include "kiln/cpu/widened_panels.h"

#include <algorithm>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/cpu/gemm.h"
#include "kiln/cpu/isa.h"
#include "kiln/cpu/low_precision.h"
#include "kiln/cpu/packed_gemm.h"

namespace kiln::cpu {

void gemm_widening_panels(int64_t M, int64_t N, int64_t K, float alpha, const float* a, const uint16_t* b,
                          bool b_transposed, int64_t ldb, Wide16 type, float beta, float* c) {
  const bool bf16 = type == Wide16::bf16;
  if (!isa_allows(Isa::avx512))  // (packed_gemm.h: widened as packed, in 256-bit registers)
    return packed_gemm(M, N, K, alpha, a, K, b, bf16 ? PackedSource::bf16 : PackedSource::f16, b_transposed, ldb,
                       beta, c, N);
  // Panels of about 2 MB of f32 (in L2 or L3 while the GEMM reads them).
  const int64_t width = std::clamp<int64_t>((int64_t(1) << 19) / std::max<int64_t>(K, 1), 16, 1024);
  thread_local std::vector<float> kept;
  kept.resize(size_t(width * K));
  float* panel = kept.data();  // (the calling thread's: the pool's threads below have their own thread_locals)
  for (int64_t n0 = 0; n0 < N; n0 += width) {
    const int64_t nb = std::min(width, N - n0);
    // The panel as GEMM's b: a weight's rows n0.. (b transposed) or columns n0.. of a [K, N] matrix.
    if (b_transposed) {
#pragma omp parallel for schedule(static) if (nb * K > 32768)
      for (int64_t n = 0; n < nb; ++n) (bf16 ? bf16_to_f32 : f16_to_f32)(b + (n0 + n) * ldb, panel + n * K, K);
    } else {
#pragma omp parallel for schedule(static) if (nb * K > 32768)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < nb; ++n) {
          const uint16_t w = b[k * ldb + n0 + n];
          panel[k * nb + n] = bf16 ? bf16_to_float(w) : f16_to_float(w);
        }
    }
    gemm(false, b_transposed, M, nb, K, alpha, a, K, panel, b_transposed ? K : nb, beta, c + n0, N);
  }
}

}  // namespace kiln::cpu
