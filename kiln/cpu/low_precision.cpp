#include "kiln/cpu/low_precision.h"

#ifdef __F16C__
#include <immintrin.h>
#endif

#include "kiln/backend/backend.h"
#include "kiln/cpu/dispatch.h"

namespace kiln::cpu {

namespace {

// Converting is most of staging's cost, so the contiguous case has its own
// loops: bf16 below; f16 uses the F16C instructions where the build targets
// them (x86-64-v3 does), which round to nearest even like float_to_f16.

// bf16 <-> f32 as plain loops the compiler vectorises (for AVX-512 too,
// through simd_kernel: dispatch.h).
void widen_bf16_span(const uint16_t* s, float* d, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_float(s[i]);
}

void narrow_bf16_span(const float* s, uint16_t* d, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]);
}

void widen(const uint16_t* s, float* d, int64_t n, bool bf16) {
  if (bf16) return widen_bf16_span(s, d, n);
  int64_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
#endif
  for (; i < n; ++i) d[i] = f16_to_float(s[i]);
}

void narrow(const float* s, uint16_t* d, int64_t n, bool bf16) {
  if (bf16) return narrow_bf16_span(s, d, n);
  int64_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) d[i] = float_to_f16(s[i]);
}

// Staged copies are an op's scratch, whatever it is computing.
Tensor f32_buffer(const Tensor& t) {
  MemoryCategoryScope scratch(MemoryCategory::workspace);
  return Tensor::empty(t.shape(), DType::f32, t.device());
}

Tensor f32_copy(const Tensor& t) {
  Tensor f = f32_buffer(t);
  backend_for(t.device()).copy(t, f);
  return f;
}

}  // namespace

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  simd_kernel([&] { widen(src, dst, n, true); });
}
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  simd_kernel([&] { narrow(src, dst, n, true); });
}
void f16_to_f32(const uint16_t* src, float* dst, int64_t n) { widen(src, dst, n, false); }

bool convert_contiguous(const Tensor& src, Tensor& dst) {
  const bool up = is_low_precision(src.dtype()) && dst.dtype() == DType::f32;
  const bool down = src.dtype() == DType::f32 && is_low_precision(dst.dtype());
  if (!(up || down) || !src.is_contiguous() || !dst.is_contiguous() || src.shape() != dst.shape()) return false;
  const bool bf16 = (up ? src.dtype() : dst.dtype()) == DType::bf16;
  for_chunks(src.numel(), kParallelMinElements, [&](int64_t b, int64_t e) {
    if (up) widen(bits16(src) + b, dst.data<float>() + b, e - b, bf16);
    else narrow(src.data<float>() + b, bits16(dst) + b, e - b, bf16);
  });
  return true;
}

bool any_low_precision(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t && t->defined() && is_low_precision(t->dtype())) return true;
  return false;
}

Tensor F32Staging::in(const Tensor& t) const {
  return t.defined() && is_low_precision(t.dtype()) ? f32_copy(t) : t;
}

Tensor& F32Staging::out(const Tensor& t, bool accumulate) {
  KILN_CHECK(staged_ < kMaxOutputs, "F32Staging: more than ", kMaxOutputs, " outputs in one op");
  Staged& s = outputs_[staged_++];
  const bool stages = t.defined() && is_low_precision(t.dtype());
  s.original = stages ? t : Tensor();  // undefined: nothing to write back
  s.staged = !stages ? t : accumulate ? f32_copy(t) : f32_buffer(t);
  return s.staged;
}

void F32Staging::finish() {
  for (size_t i = 0; i < staged_; ++i) {
    Staged& s = outputs_[i];
    if (s.original.defined()) backend_for(s.original.device()).copy(s.staged, s.original);
    s = Staged();
  }
  staged_ = 0;
}

}  // namespace kiln::cpu
