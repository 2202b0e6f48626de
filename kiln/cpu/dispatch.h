// Dtype dispatch and the small numeric helpers shared by the CPU op files.
#pragma once
#include <cmath>

#include "kiln/core/tensor.h"

namespace kiln::cpu {

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

// GPT-2's tanh approximation of GELU, and its derivative.
template <typename T>
inline T gelu(T x) {
  const T c = T(0.7978845608028654);  // sqrt(2/pi)
  return T(0.5) * x * (T(1) + std::tanh(c * (x + T(0.044715) * x * x * x)));
}
template <typename T>
inline T gelu_grad(T x) {
  const T c = T(0.7978845608028654);
  T inner = c * (x + T(0.044715) * x * x * x);
  T th = std::tanh(inner);
  T sech2 = T(1) - th * th;
  return T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * c * (T(1) + T(3) * T(0.044715) * x * x);
}

}  // namespace kiln::cpu
