// Rotary position embedding (backend.h): each row of x [..., D] against its
// row of cos and sin, found through their strides (0 over the heads that
// share a position's table row). f32/f64 compute in themselves; bf16/f16
// in f32, rounded after each product and the sum as the unfused
// x * cos + rotate_half(x) * sin rounds.
#include <initializer_list>

#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"

namespace kiln::cpu {

namespace {

template <typename T>
void rotate_rows(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  using A = ComputeOf<T>;
  const int64_t D = x.size(-1), R = cos.size(-1), half = R / 2, N = x.numel() / D, lead = x.dim() - 1;
  const T* xp = stored<const T>(x);
  const T* cp = stored<const T>(cos);
  const T* sp = stored<const T>(sin);
  T* yp = stored<T>(y);
  const Shape sizes = x.shape();
  const Strides cos_strides = cos.strides(), sin_strides = sin.strides();
  auto value = [](T v) { return A(to_double(v)); };
  auto product = [&](A a, T b) { return rounded<T>(a * value(b)); };
  for_chunks_if(N, N > 1 && N * D > kParallelMinElements, [&](int64_t first, int64_t last) {
    for (int64_t n = first; n < last; ++n) {
      int64_t c_at = 0, s_at = 0;
      for (int64_t d = lead - 1, rest = n; d >= 0; --d) {
        const int64_t i = rest % sizes[size_t(d)];
        rest /= sizes[size_t(d)];
        c_at += i * cos_strides[size_t(d)];
        s_at += i * sin_strides[size_t(d)];
      }
      const T* xr = xp + n * D;
      const T* c = cp + c_at;
      const T* s = sp + s_at;
      T* yr = yp + n * D;
      // Each j reads and writes only j and j + half, so the lanes are independent (y may be x).
#pragma omp simd
      for (int64_t j = 0; j < half; ++j) {
        const A a = value(xr[j]), b = value(xr[j + half]);
        yr[j] = from_double<T>(product(a, c[j]) + product(-b, s[j]));
        yr[j + half] = from_double<T>(product(b, c[j + half]) + product(a, s[j + half]));
      }
      for (int64_t j = R; j < D; ++j) yr[j] = xr[j];
    }
  });
}

}  // namespace

void CpuBackend::rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  const char* op = "rotary";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &cos, &sin, &y}) check_cpu(*t, op);
  check_contiguous(x, op, "x");
  check_contiguous(y, op, "y");
  KILN_CHECK(x.dim() >= 1 && y.shape() == x.shape(), op, ": y ", shape_str(y.shape()), " must be x's ",
             shape_str(x.shape()));
  const int64_t D = x.size(-1), R = cos.dim() == x.dim() ? cos.size(-1) : -1;
  KILN_CHECK(R >= 0 && R % 2 == 0 && R <= D && sin.shape() == cos.shape(), op, ": cos and sin ",
             shape_str(cos.shape()), " must be x's leading shape ", shape_str(x.shape()), " with an even width <= ", D);
  for (int64_t d = 0; d + 1 < x.dim(); ++d)
    KILN_CHECK(cos.size(d) == x.size(d), op, ": cos ", shape_str(cos.shape()), " must have x's leading shape ",
               shape_str(x.shape()), " (expand it)");
  KILN_CHECK(R == 0 || (cos.stride(-1) == 1 && sin.stride(-1) == 1), op, ": cos and sin rows must be contiguous");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&cos, &sin, &y})
    KILN_CHECK(t->dtype() == x.dtype(), op, ": x is ", dtype_name(x.dtype()), " but an operand is ",
               dtype_name(t->dtype()));
  if (x.numel() == 0) return;
  dispatch_compute(x.dtype(), op, [&]<typename T>() { rotate_rows<T>(x, cos, sin, y); });
}

}  // namespace kiln::cpu
