// Device-side helpers for the CUDA kernels: dtype dispatch, conversions to the
// compute type, math that must stay accurate under --use_fast_math, and
// warp/block reductions.
//
// Compute type: bf16/f16/f32 inputs compute in f32, f64 in f64 (Acc<T>).
// Conversions to bf16/f16 round to nearest even, as the CPU's float_to_bf16 /
// float_to_f16 do; f64 goes to bf16/f16 through f32, also as the CPU does.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"

namespace kiln::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

template <typename T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};
template <typename T>
using Acc = typename AccOf<T>::type;

// ---- conversions (to the compute type and back)
__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ float to_acc(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_acc(f16 x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_acc(float x);
template <>
__device__ __forceinline__ float from_acc<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ double from_acc<double>(float x) {
  return double(x);
}
template <>
__device__ __forceinline__ bf16 from_acc<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ f16 from_acc<f16>(float x) {
  return __float2half_rn(x);
}
template <typename T>
__device__ __forceinline__ T from_acc(double x) {
  return from_acc<T>(float(x));
}
template <>
__device__ __forceinline__ double from_acc<double>(double x) {
  return x;
}
// v rounded to T and back: where an unfused op would have stored a T.
template <typename T>
__device__ __forceinline__ Acc<T> rounded(Acc<T> v) {
  return to_acc(from_acc<T>(v));
}

// N elements of T read or written in one access (a 16-byte piece of f32
// rows beside its bf16/f16 counterpart, 8 bytes).
template <typename T, int N>
struct alignas(sizeof(T) * N) VecOf {
  T v[N];
};

// Runs f.template operator()<T>() for the floating dtypes kernels compute in.
template <typename F>
void dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32:
      f.template operator()<float>();
      return;
    case DType::f64:
      f.template operator()<double>();
      return;
    case DType::bf16:
      f.template operator()<bf16>();
      return;
    case DType::f16:
      f.template operator()<f16>();
      return;
    default:
      break;
  }
  KILN_FAIL(op, " on cuda supports f32, f64, bf16 and f16, got ", dtype_name(t));
}

// ---- math
// tanh: --use_fast_math turns tanhf into tanh.approx.f32 (about 2^-11
// relative error), too coarse to match the CPU to 1e-5. expm1f is not
// remapped and keeps tanh accurate near 0 where 1 - 2/(e^2x + 1) would not.
__device__ __forceinline__ float tanh_accurate(float x) {
  float a = fabsf(x);
  if (a > 9.0f) return copysignf(1.0f, x);  // tanh(9) rounds to 1 in f32
  float e = expm1f(2.0f * a);
  return copysignf(e / (e + 2.0f), x);
}
__device__ __forceinline__ double tanh_accurate(double x) { return tanh(x); }

__device__ __forceinline__ float exp_acc(float x) { return expf(x); }
__device__ __forceinline__ double exp_acc(double x) { return exp(x); }
__device__ __forceinline__ float log_acc(float x) { return logf(x); }
__device__ __forceinline__ double log_acc(double x) { return log(x); }
__device__ __forceinline__ float sqrt_acc(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_acc(double x) { return sqrt(x); }

// GPT-2's tanh approximation of GELU and its derivative (same formulas as
// kiln/cpu/dispatch.h).
template <typename A>
__device__ __forceinline__ A gelu(A x) {
  const A c = A(0.7978845608028654);
  return A(0.5) * x * (A(1) + tanh_accurate(c * (x + A(0.044715) * x * x * x)));
}
template <typename A>
__device__ __forceinline__ A gelu_grad(A x) {
  const A c = A(0.7978845608028654);
  A th = tanh_accurate(c * (x + A(0.044715) * x * x * x));
  A sech2 = A(1) - th * th;
  return A(0.5) * (A(1) + th) + A(0.5) * x * sech2 * c * (A(1) + A(3) * A(0.044715) * x * x);
}
// f32: through s = sigmoid(2u) = 0.5 (1 + tanh(u)), u = sqrt(2/pi) (x +
// 0.044715 x^3), as the CPU computes it (kiln/cpu/dispatch.h): one fast exp
// and one reciprocal instead of tanh_accurate's expm1f (the MLP's GELU and
// its backward were bound by it, not by memory). 1 - s is formed as e * s,
// so it keeps its digits where s is near 1; exp overflowing (x far below
// 0) gives s = 0 and 1 - s = 1.
template <>
__device__ __forceinline__ float gelu(float x) {
  const float e = __expf(-1.5957691216057308f * (x + 0.044715f * x * x * x));
  return x / (1.0f + e);
}
template <>
__device__ __forceinline__ float gelu_grad(float x) {
  const float e = __expf(-1.5957691216057308f * (x + 0.044715f * x * x * x));
  const float s = 1.0f / (1.0f + e), one_minus_s = fminf(e * s, 1.0f);
  return s + 1.5957691216057308f * x * s * one_minus_s * (1.0f + 0.134145f * x * x);
}

// The exact GELU, x * Phi(x), and its derivative (kiln/cpu/dispatch.h).
template <typename A>
__device__ __forceinline__ A gelu_erf(A x) {
  return A(0.5) * x * (A(1) + erf(x * A(0.7071067811865476)));
}
template <typename A>
__device__ __forceinline__ A gelu_erf_grad(A x) {
  return A(0.5) * (A(1) + erf(x * A(0.7071067811865476))) + x * A(0.3989422804014327) * exp(A(-0.5) * x * x);
}

template <typename A>
__device__ __forceinline__ A neg_infinity();
template <>
__device__ __forceinline__ float neg_infinity<float>() {
  return -INFINITY;
}
template <>
__device__ __forceinline__ double neg_infinity<double>() {
  return -double(INFINITY);
}

// max/min that return NaN when either operand is NaN. CUDA's max()/fmaxf
// return the other operand, which would hide a NaN from the loss (the CPU
// backend's max_nan is the same rule, and PyTorch's).
template <typename A>
__device__ __forceinline__ A max_nan(A a, A b) {
  return (a != a || b != b) ? a + b : (a > b ? a : b);
}
template <typename A>
__device__ __forceinline__ A min_nan(A a, A b) {
  return (a != a || b != b) ? a + b : (a < b ? a : b);
}

// ---- reductions (all lanes of the warp must take part)
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename A>
__device__ __forceinline__ A warp_max(A v) {
  for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum/max for blockDim.x a multiple of 32 (at most 1024). `scratch`
// holds 32 values; every thread gets the result. Safe to call repeatedly.
template <typename A>
__device__ A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : A(0);
  return warp_sum(v);
}
template <typename A>
__device__ A block_max(A v, A* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : neg_infinity<A>();
  return warp_max(v);
}

// Reads index i of an i32 or i64 index tensor as int64.
__device__ __forceinline__ int64_t load_index(const void* ids, bool is_i64, int64_t i) {
  return is_i64 ? static_cast<const int64_t*>(ids)[i] : int64_t(static_cast<const int32_t*>(ids)[i]);
}

}  // namespace kiln::cuda
