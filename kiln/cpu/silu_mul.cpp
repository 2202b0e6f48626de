// SwiGLU's product (backend.h): gate * sigmoid(gate) * up in one pass, with
// the sigmoid the unary op computes (fast_exp) and each result rounded to
// the dtype where the unfused ops round, so the bits are theirs.
#include <initializer_list>

#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"

namespace kiln::cpu {

namespace {

template <typename T>
void silu_mul_values(const T* gate, const T* up, T* out, int64_t n) {
  using A = ComputeOf<T>;
  for_chunks_if(n, n > kParallelMinElements, [&](int64_t first, int64_t last) {
#pragma omp simd
    for (int64_t i = first; i < last; ++i) {
      const A x = A(to_double(gate[i]));
      const A s = rounded<T>(A(1) / (A(1) + fast_exp(-x)));
      out[i] = from_double<T>(rounded<T>(x * s) * A(to_double(up[i])));
    }
  });
}

}  // namespace

void CpuBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const char* op = "silu_mul";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gate, &up, &out}) {
    check_cpu(*t, op);
    check_contiguous(*t, op, "an operand");
    KILN_CHECK(t->shape() == gate.shape() && t->dtype() == gate.dtype(), op, ": gate ", shape_str(gate.shape()), " ",
               dtype_name(gate.dtype()), ", up and out must share a shape and dtype, got ", shape_str(t->shape()), " ",
               dtype_name(t->dtype()));
  }
  dispatch_compute(gate.dtype(), op, [&]<typename T>() {
    silu_mul_values(stored<const T>(gate), stored<const T>(up), stored<T>(out), gate.numel());
  });
}

}  // namespace kiln::cpu
