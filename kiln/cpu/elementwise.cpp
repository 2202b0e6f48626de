// Copy/cast, fill, and unary/binary elementwise ops. The contiguous case is a
// flat loop the compiler vectorises; anything else walks strides row by row.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#include "kiln/cpu/bf16_paths.h"
#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/low_precision.h"
#include "kiln/cpu/strided_loop.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kParallelThreshold = kParallelMinElements;

bool same_layout_contiguous(const Tensor& a, const Tensor& b) {
  return a.is_contiguous() && b.is_contiguous() && a.shape() == b.shape();
}

template <typename T>
T apply_unary(UnaryOp op, T x, T s) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::rsqrt: return T(1) / std::sqrt(x);
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::sigmoid: return T(1) / (T(1) + fast_exp(-x));  // (SiLU's: libm's scalar expf was 15% of a prompt)
    case UnaryOp::relu: return x < T(0) ? T(0) : x;  // NaN stays NaN, as torch.relu
    case UnaryOp::gelu: return gelu(x);
    case UnaryOp::gelu_erf: return gelu_erf(x);
    case UnaryOp::abs: return std::abs(x);
    case UnaryOp::square: return x * x;
    case UnaryOp::reciprocal: return T(1) / x;
    case UnaryOp::add_scalar: return x + s;
    case UnaryOp::mul_scalar: return x * s;
    case UnaryOp::pow_scalar: return std::pow(x, s);
  }
  return x;
}

template <typename T>
T apply_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::maximum: return max_nan(a, b);
    case BinaryOp::minimum: return min_nan(a, b);
    case BinaryOp::pow: return std::pow(a, b);
    case BinaryOp::eq: return a == b ? T(1) : T(0);
    case BinaryOp::gt: return a > b ? T(1) : T(0);
    case BinaryOp::lt: return a < b ? T(1) : T(0);
    case BinaryOp::relu_backward: {
      // torch's threshold_backward (0 where b <= 0, else a; a NaN b passes a),
      // as a bit mask rather than a branch: the compiler vectorizes it, and
      // random signs cost no mispredicted branches.
      using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
      return std::bit_cast<T>(std::bit_cast<Bits>(a) & (Bits(0) - Bits(!(b <= T(0)))));
    }
    case BinaryOp::gelu_backward: return a * gelu_grad(b);
    case BinaryOp::gelu_erf_backward: return a * gelu_erf_grad(b);
    case BinaryOp::tanh_backward: return a * (T(1) - b * b);
    case BinaryOp::sigmoid_backward: return a * b * (T(1) - b);
  }
  return a;
}

// One instantiation per op so the contiguous loop has no switch inside and
// vectorises.
template <typename T, UnaryOp OP>
void unary_span(const T* x, T* y, int64_t n, T s) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = apply_unary<T>(OP, x[i], s);
}
template <typename T, UnaryOp OP>
void unary_contiguous(const T* x, T* y, int64_t n, T s) {
  for_chunks(n, kParallelThreshold,
             [&](int64_t b, int64_t e) { unary_span<T, OP>(x + b, y + b, e - b, s); });
}

template <typename T, BinaryOp OP>
void binary_span(const T* a, const T* b, T* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = apply_binary<T>(OP, a[i], b[i]);
}
template <typename T, BinaryOp OP>
void binary_contiguous(const T* a, const T* b, T* y, int64_t n) {
  for_chunks(n, kParallelThreshold,
             [&](int64_t s, int64_t e) { binary_span<T, OP>(a + s, b + s, y + s, e - s); });
}

// One row of a strided binary op, the op fixed at compile time so the loop
// vectorises: b is a row (b_step 1) or one broadcast value (b_step 0).
template <typename T, BinaryOp OP>
void binary_row(const T* a, const T* b, int64_t b_step, T* y, int64_t n) {
  if (b_step == 0) {
    const T bv = b[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = apply_binary<T>(OP, a[i], bv);
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = apply_binary<T>(OP, a[i], b[i]);
}

template <typename T, size_t... I>
void binary_row_dispatch(BinaryOp op, const T* a, const T* b, int64_t b_step, T* y, int64_t n,
                         std::index_sequence<I...>) {
  ((op == BinaryOp(I) ? binary_row<T, BinaryOp(I)>(a, b, b_step, y, n) : void()), ...);
}

template <typename T, size_t... I>
void unary_contiguous_dispatch(UnaryOp op, const T* x, T* y, int64_t n, T s, std::index_sequence<I...>) {
  ((op == UnaryOp(I) ? unary_contiguous<T, UnaryOp(I)>(x, y, n, s) : void()), ...);
}

template <typename T, size_t... I>
void binary_contiguous_dispatch(BinaryOp op, const T* a, const T* b, T* y, int64_t n, std::index_sequence<I...>) {
  ((op == BinaryOp(I) ? binary_contiguous<T, BinaryOp(I)>(a, b, y, n) : void()), ...);
}

// bf16 or f16 operands and output of one dtype and contiguous layout: each
// value widened, computed in f32 and rounded once (as staging would round:
// the same values) in one vectorised pass, so memory sees 2 bytes per value
// each way.
bool contiguous_16_bits(std::initializer_list<const Tensor*> operands, const Tensor& out) {
  if (out.dtype() != DType::bf16 && out.dtype() != DType::f16) return false;
  for (const Tensor* t : operands)
    if (t->dtype() != out.dtype() || !same_layout_contiguous(*t, out)) return false;
  return true;
}
// Calls f.template operator()<T>() with T the storage type of bf16 or f16 `t`.
template <typename F>
void dispatch_16_bits(DType t, F&& f) {
  if (t == DType::bf16)
    f.template operator()<bf16_t>();
  else
    f.template operator()<f16_t>();
}
template <typename T>
float widened(T v) {
  return float(to_double(v));
}
template <typename T>
T narrowed(float v) {
  return from_double<T>(double(v));
}

template <typename T, UnaryOp OP>
void unary_span_16(const T* x, T* y, int64_t n, float s) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = narrowed<T>(apply_unary<float>(OP, widened(x[i]), s));
}
template <typename T, BinaryOp OP>
void binary_span_16(const T* a, const T* b, T* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = narrowed<T>(apply_binary<float>(OP, widened(a[i]), widened(b[i])));
}

template <typename T, size_t... I>
void unary_16(UnaryOp op, const T* x, T* y, int64_t n, float s, std::index_sequence<I...>) {
  for_chunks(n, kParallelThreshold, [&](int64_t b, int64_t e) {
    ((op == UnaryOp(I) ? unary_span_16<T, UnaryOp(I)>(x + b, y + b, e - b, s) : void()), ...);
  });
}
template <typename T, size_t... I>
void binary_16(BinaryOp op, const T* a, const T* b, T* y, int64_t n, std::index_sequence<I...>) {
  for_chunks(n, kParallelThreshold, [&](int64_t s, int64_t e) {
    ((op == BinaryOp(I) ? binary_span_16<T, BinaryOp(I)>(a + s, b + s, y + s, e - s) : void()), ...);
  });
}

// ReLU and its gradient on 16-bit floats' bits, without widening: both only
// choose between an input and zero, so they read the sign and the
// magnitude. Matches the f32 ops exactly: -0 and NaNs pass ReLU; a NaN b
// passes a. Written with bitwise operators and masks, not && and ?:, so the
// loops vectorise instead of branching on random signs.
template <typename T>
inline uint16_t keep_mask(T x, bool keep_zero) {  // all ones where ReLU keeps x
  constexpr uint16_t kInfinity = std::is_same_v<T, bf16_t> ? 0x7f80 : 0x7c00;
  const uint16_t magnitude = x.bits & 0x7fff;
  const bool negative = bool(x.bits & 0x8000) & (magnitude != 0) & (magnitude <= kInfinity);  // not NaN, not -0
  const bool drop = negative | (!keep_zero & (magnitude == 0));
  return uint16_t(drop) - uint16_t(1);
}
template <typename T>
void relu_16(const T* x, T* y, int64_t n) {
  for_chunks(n, kParallelThreshold, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i].bits = x[i].bits & keep_mask(x[i], true);
  });
}
template <typename T>
void relu_backward_16(const T* g, const T* x, T* y, int64_t n) {
  for_chunks(n, kParallelThreshold, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i].bits = g[i].bits & keep_mask(x[i], false);  // x <= 0 (but not NaN): 0
  });
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  KILN_CHECK(a.shape() == b.shape(), op, ": shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
             " differ");
}

}  // namespace

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  check_cpu(src, "copy");
  check_cpu(dst, "copy");
  check_same_shape(src, dst, "copy");
  if (src.dtype() == dst.dtype() && same_layout_contiguous(src, dst)) {
    if (src.data_ptr() != dst.data_ptr()) std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
    return;
  }
  if (convert_contiguous(src, dst)) return;  // autocast's casts and staging
  dispatch_all(src.dtype(), [&]<typename S>() {
    dispatch_all(dst.dtype(), [&]<typename D>() {
      const S* s = static_cast<const S*>(src.data_ptr());
      D* d = static_cast<D*>(dst.data_ptr());
      strided_loop<2>(src.shape(), {&src.strides(), &dst.strides()},
                      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                        const S* sp = s + off[0];
                        D* dp = d + off[1];
                        if constexpr (std::is_same_v<S, D>) {
                          if (st[0] == 1 && st[1] == 1) return void(std::memcpy(dp, sp, size_t(n) * sizeof(S)));
                          for (int64_t i = 0; i < n; ++i) dp[i * st[1]] = sp[i * st[0]];
                        } else {
                          for (int64_t i = 0; i < n; ++i) dp[i * st[1]] = from_double<D>(to_double(sp[i * st[0]]));
                        }
                      });
    });
  });
}

void CpuBackend::fill(Tensor& dst, double value) {
  check_cpu(dst, "fill");
  dispatch_all(dst.dtype(), [&]<typename T>() {
    T v = from_double<T>(value);
    T* d = static_cast<T*>(dst.data_ptr());
    if (dst.is_contiguous()) {  // the common case (fresh buffers, gradient accumulators): one vectorised pass
      const int64_t n = dst.numel();
      simd_for(n, kParallelThreshold, [&](int64_t i) { d[i] = v; });
      return;
    }
    strided_loop<1>(dst.shape(), {&dst.strides()},
                    [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
                      for (int64_t i = 0; i < n; ++i) d[off[0] + i * st[0]] = v;
                    });
  });
}

bool unary_runs_on_16_bits(const Tensor& x, const Tensor& out) {
  return x.shape() == out.shape() && contiguous_16_bits({&x}, out);
}

bool binary_runs_on_16_bits(const Tensor& a, const Tensor& b, const Tensor& out) {
  return a.shape() == out.shape() && b.shape() == out.shape() && contiguous_16_bits({&a, &b}, out);
}

void CpuBackend::unary(UnaryOp op, const Tensor& x, Tensor& out, double scalar) {
  if (unary_runs_on_16_bits(x, out))
    return dispatch_16_bits(out.dtype(), [&]<typename T>() {
      if (op == UnaryOp::relu) return relu_16(stored<const T>(x), stored<T>(out), out.numel());
      unary_16(op, stored<const T>(x), stored<T>(out), out.numel(), float(scalar),
               std::make_index_sequence<size_t(UnaryOp::pow_scalar) + 1>());
    });
  // bf16/f16 otherwise: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&x, &out}))
    return in_f32([&](F32Staging& s) { unary(op, s.in(x), s.out(out), scalar); });
  check_cpu(x, "unary");
  check_same_shape(x, out, "unary");
  KILN_CHECK(x.dtype() == out.dtype(), "unary: input ", dtype_name(x.dtype()), " and output ",
             dtype_name(out.dtype()), " differ");
  dispatch_float(x.dtype(), "unary op", [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(out.data_ptr());
    T s = T(scalar);
    if (same_layout_contiguous(x, out)) {
      unary_contiguous_dispatch<T>(op, xp, yp, x.numel(), s, std::make_index_sequence<size_t(UnaryOp::pow_scalar) + 1>());
      return;
    }
    strided_loop<2>(x.shape(), {&x.strides(), &out.strides()},
                    [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                      for (int64_t i = 0; i < n; ++i)
                        yp[off[1] + i * st[1]] = apply_unary<T>(op, xp[off[0] + i * st[0]], s);
                    });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (binary_runs_on_16_bits(a, b, out))
    return dispatch_16_bits(out.dtype(), [&]<typename T>() {
      if (op == BinaryOp::relu_backward)
        return relu_backward_16(stored<const T>(a), stored<const T>(b), stored<T>(out), out.numel());
      binary_16(op, stored<const T>(a), stored<const T>(b), stored<T>(out), out.numel(),
                std::make_index_sequence<size_t(BinaryOp::sigmoid_backward) + 1>());
    });
  // bf16/f16 otherwise: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&a, &b, &out}))
    return in_f32([&](F32Staging& s) { binary(op, s.in(a), s.in(b), s.out(out)); });
  check_cpu(a, "binary");
  check_cpu(b, "binary");
  check_same_shape(a, out, "binary");
  check_same_shape(b, out, "binary");
  KILN_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "binary: operand dtypes ", dtype_name(a.dtype()),
             ", ", dtype_name(b.dtype()), " and output ", dtype_name(out.dtype()), " must match");
  dispatch_float(a.dtype(), "binary op", [&]<typename T>() {
    const T* ap = static_cast<const T*>(a.data_ptr());
    const T* bp = static_cast<const T*>(b.data_ptr());
    T* yp = static_cast<T*>(out.data_ptr());
    if (same_layout_contiguous(a, out) && same_layout_contiguous(b, out)) {
      binary_contiguous_dispatch<T>(op, ap, bp, yp, out.numel(),
                                    std::make_index_sequence<size_t(BinaryOp::sigmoid_backward) + 1>());
      return;
    }
    strided_loop<3>(out.shape(), {&a.strides(), &b.strides(), &out.strides()},
                    [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
                      const T* ar = ap + off[0];
                      const T* br = bp + off[1];
                      T* yr = yp + off[2];
                      if (st[0] == 1 && (st[1] == 0 || st[1] == 1) && st[2] == 1) {  // a row, b a row or a scalar
                        binary_row_dispatch<T>(op, ar, br, st[1], yr, n,
                                               std::make_index_sequence<size_t(BinaryOp::sigmoid_backward) + 1>());
                      } else {
                        for (int64_t i = 0; i < n; ++i)
                          yr[i * st[2]] = apply_binary<T>(op, ar[i * st[0]], br[i * st[1]]);
                      }
                    });
  });
}

}  // namespace kiln::cpu
