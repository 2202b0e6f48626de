// Dropout mask from the counter-based Philox stream (kiln/core/philox.h):
//
//   u_i = philox_uniform(seed, offset, i);  mask_i = u_i >= p ? 1/(1-p) : 0
//
// The CUDA backend uses exactly this formula, so both devices draw the same
// mask for the same (seed, offset) and a resumed run continues the stream.
// Keep the comparison in float (u is a float with 24 random bits) and the
// scale computed in the mask's dtype, as the CUDA kernel does.
//
// One Philox call yields four uniforms, for the four consecutive stream
// positions sharing counter (offset + i) >> 2, so the loop walks counters.
#include "kiln/core/philox.h"
#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

void CpuBackend::dropout_mask(Tensor& mask, float p, uint64_t seed, uint64_t offset) {
  // bf16/f16: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&mask}))
    return in_f32([&](F32Staging& s) { dropout_mask(s.out(mask), p, seed, offset); });
  const char* op = "dropout_mask";
  check_cpu(mask, op);
  check_contiguous(mask, op, "mask");
  KILN_CHECK(p >= 0.0f && p <= 1.0f, op, ": p must be in [0, 1], got ", p);
  const int64_t n = mask.numel();
  if (n == 0) return;

  dispatch_float(mask.dtype(), op, [&]<typename T>() {
    T* m = mask.data<T>();
    // p = 1 drops everything; 1/(1-p) would be inf, and u >= 1 never holds.
    const T keep_scale = p < 1.0f ? T(1) / (T(1) - T(p)) : T(0);
    const uint64_t first = offset >> 2, last = (offset + uint64_t(n) - 1) >> 2;
    const int64_t counters = int64_t(last - first + 1);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t c = 0; c < counters; ++c) {
      const uint64_t counter = first + uint64_t(c);
      const PhiloxOutput r = philox4x32_10(seed, counter);
      for (uint64_t lane = 0; lane < 4; ++lane) {
        const uint64_t pos = counter * 4 + lane;  // position in the stream
        if (pos < offset || pos - offset >= uint64_t(n)) continue;
        const float u = float(r.v[lane] >> 8) * (1.0f / 16777216.0f);
        m[pos - offset] = u >= p ? keep_scale : T(0);
      }
    }
  });
}

}  // namespace kiln::cpu
