// Dtype dispatch and the small numeric helpers shared by the CPU op files.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kiln/core/fast_exp.h"
#include "kiln/core/tensor.h"
#include "kiln/cpu/isa.h"

namespace kiln::cpu {

// Kiln's SIMD loops are written once, as plain `omp simd` loops, and each
// call site runs them through simd_kernel(f): f, with everything it calls
// inlined (GCC's flatten), compiled twice, for the build's baseline
// (KILN_ARCH_FLAGS, x86-64-v3: AVX2) and for AVX-512, and chosen at run
// time by max_isa(), so KILN_MAX_ISA=avx2 runs the AVX2 loops on an AVX-512
// machine (kiln/cpu/isa.h). On Zen 4 the AVX-512 versions of GELU and its
// gradient run 1.7x faster, and the same binary runs on any x86-64-v3 CPU.
// (GCC's target_clones chose the same two versions when the program
// loaded, from the CPU alone, so no cap could reach them.)
//
// A parallel loop calls simd_kernel inside its body, once per chunk:
// OpenMP outlines a parallel region into a function of its own, compiled
// for the function that holds the pragma, so a parallel loop inside f
// would run its baseline version.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
template <typename Kernel>
[[gnu::flatten, gnu::target("avx512f,avx512bw,avx512vl,avx512dq,avx512cd")]] void run_avx512(const Kernel& kernel) {
  kernel();
}
template <typename Kernel>
[[gnu::flatten]] void run_baseline(const Kernel& kernel) {
  kernel();
}
inline bool avx512_loops() {
  static const bool allowed = isa_allows(Isa::avx512);
  return allowed;
}
template <typename Kernel>
inline void simd_kernel(const Kernel& kernel) {
  if (avx512_loops()) return run_avx512(kernel);
  run_baseline(kernel);
}
#else
template <typename Kernel>
inline void simd_kernel(const Kernel& kernel) {
  kernel();
}
#endif

// Below this many elements a cheap elementwise loop runs on one thread: with
// passive OpenMP waiting (runtime_defaults.h) waking the pool costs tens of
// microseconds, more than such a loop takes (measured on the MLP: 2 threads
// ran slower than 1 at a threshold of 32768).
constexpr int64_t kParallelMinElements = int64_t(1) << 17;

// fn(begin, end) over [0, n): in one call unless `parallel`, else one
// static chunk per thread of the pool, each run through simd_kernel. The
// loops inside fn are plain `omp simd` loops: a `parallel for simd ...
// if (...)` whose if is false runs an unvectorised copy of the loop
// (GCC 12: 4x slower on a 64K ReLU, measured).
template <typename Fn>
inline void for_chunks_if(int64_t n, bool parallel, Fn&& fn) {
  if (!parallel) return simd_kernel([&] { fn(int64_t(0), n); });
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), per = (n + threads - 1) / threads;
    const int64_t begin = std::min(n, omp_get_thread_num() * per), end = std::min(n, begin + per);
    if (begin < end) simd_kernel([&] { fn(begin, end); });
  }
}
// body(i) for each i in [0, n): over OpenMP's threads (static schedule) when
// `parallel`, else on the caller without entering an OpenMP region. (A
// region whose if() is false made libgomp allocate on every call in Kiln's
// process: kiln_alloc_tests saw it in a decoding step.) Unlike
// for_chunks_if, the body runs as compiled here, not through simd_kernel.
template <typename Body>
inline void for_each_if(int64_t n, bool parallel, const Body& body) {
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
}
// for_chunks_if, in parallel when n > parallel_min.
template <typename Fn>
inline void for_chunks(int64_t n, int64_t parallel_min, Fn&& fn) {
  for_chunks_if(n, n > parallel_min, fn);
}

// body(i) for every i in [0, n), vectorised, over the pool when n > parallel_min.
template <typename Body>
inline void simd_for(int64_t n, int64_t parallel_min, Body&& body) {
  for_chunks(n, parallel_min, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) body(i);
  });
}

// Storage-only types: the CPU converts them to float to compute.
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };

template <typename T> inline double to_double(T v) { return double(v); }
template <> inline double to_double(bf16_t v) { return bf16_to_float(v.bits); }
template <> inline double to_double(f16_t v) { return f16_to_float(v.bits); }
template <typename T> inline T from_double(double v) { return T(v); }
template <> inline bf16_t from_double(double v) { return {float_to_bf16(float(v))}; }
template <> inline f16_t from_double(double v) { return {float_to_f16(float(v))}; }

// Calls f.template operator()<T>() with T the C++ type of `t`.
template <typename F>
void dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    case DType::bf16: f.template operator()<bf16_t>(); return;
    case DType::f16: f.template operator()<f16_t>(); return;
    case DType::i32: f.template operator()<int32_t>(); return;
    case DType::i64: f.template operator()<int64_t>(); return;
    case DType::u8: f.template operator()<uint8_t>(); return;
  }
}

// Compute ops on the CPU run in f32 or f64.
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  if (t == DType::f32) return f.template operator()<float>();
  if (t == DType::f64) return f.template operator()<double>();
  KILN_FAIL(op, " on cpu supports f32 and f64, got ", dtype_name(t), "; cast with .to(DType::f32) first");
}

// Kernels that take bf16/f16 storage directly (not staged in f32) compute
// in ComputeOf<T> (f32, f64 for f64) and round with rounded<T> where the
// unfused ops they replace round each result to T.
template <typename T>
using ComputeOf = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <typename T>
inline ComputeOf<T> rounded(ComputeOf<T> v) {
  return ComputeOf<T>(to_double(from_double<T>(double(v))));
}
// A tensor's elements as T, the storage types included (Tensor::data<T>
// knows the C++ types of dtypes alone).
template <typename T>
inline T* stored(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}
template <typename F>
void dispatch_compute(DType t, const char* op, F&& f) {
  if (t == DType::bf16) return f.template operator()<bf16_t>();
  if (t == DType::f16) return f.template operator()<f16_t>();
  if (t == DType::f32 || t == DType::f64) return dispatch_float(t, op, f);
  KILN_FAIL(op, " takes f32, f64, bf16 or f16, got ", dtype_name(t));
}

// Reads integer indices (i32 or i64) as int64.
inline int64_t load_index(const Tensor& ids, int64_t i) {
  if (ids.dtype() == DType::i32) return static_cast<const int32_t*>(ids.data_ptr())[i];
  if (ids.dtype() == DType::i64) return static_cast<const int64_t*>(ids.data_ptr())[i];
  KILN_FAIL("index tensors must be i32 or i64, got ", dtype_name(ids.dtype()));
}

inline void check_contiguous(const Tensor& t, const char* op, const char* what) {
  KILN_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous (got strides ", shape_str(t.strides()),
             " for shape ", shape_str(t.shape()), ")");
}

inline void check_cpu(const Tensor& t, const char* op) {
  KILN_CHECK(t.device().is_cpu(), op, ": expected a cpu tensor, got one on ", t.device().str());
}

// max/min that return NaN when either operand is NaN (std::max returns its
// first operand), as torch.maximum/amax do: a NaN must reach the loss.
template <typename T>
inline T max_nan(T a, T b) {
  return (a != a || b != b) ? a + b : (a > b ? a : b);
}
template <typename T>
inline T min_nan(T a, T b) {
  return (a != a || b != b) ? a + b : (a < b ? a : b);
}

// GPT-2's tanh approximation of GELU, 0.5 x (1 + tanh(u)) with
// u = sqrt(2/pi) (x + 0.044715 x^3), and its derivative, written through
// s = sigmoid(2u) = 0.5 (1 + tanh(u)) (so 1 - tanh(u)^2 = 4 s (1 - s)): one
// exp and one division, on fast_exp for f32 (a third faster than going
// through tanh).
template <typename T>
inline T gelu_sigmoid(T x) {
  const T two_c = T(2 * 0.7978845608028654);  // 2 sqrt(2/pi)
  return T(1) / (T(1) + fast_exp(-two_c * (x + T(0.044715) * x * x * x)));
}
template <typename T>
inline T gelu(T x) {
  return x * gelu_sigmoid(x);
}
// The exact GELU, x * Phi(x), and its derivative Phi(x) + x * phi(x): f32
// through fast_erfc_nonnegative (Phi(x) = erfc(-x / sqrt 2) / 2, branch-free
// so that it vectorises), f64 (the gradient checks' reference) through libm.
template <typename T>
inline T normal_cdf(T x) {
  if constexpr (std::is_same_v<T, float>) {
    const float half_tail = 0.5f * fast_erfc_nonnegative(std::abs(x) * 0.7071067811865476f);
    return x < 0 ? half_tail : 1.0f - half_tail;
  } else {
    return T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476)));
  }
}
template <typename T>
inline T gelu_erf(T x) {
  return x * normal_cdf(x);
}
template <typename T>
inline T gelu_erf_grad(T x) {
  return normal_cdf(x) + x * T(0.3989422804014327) * fast_exp(T(-0.5) * x * x);
}
template <typename T>
inline T gelu_grad(T x) {
  const T c = T(0.7978845608028654);
  const T s = gelu_sigmoid(x);
  return s + T(2) * x * s * (T(1) - s) * c * (T(1) + T(3) * T(0.044715) * x * x);
}

}  // namespace kiln::cpu
