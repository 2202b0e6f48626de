// f16 conversions for the quantized kernels' inner loops (ggml's f16 block
// scales, activation scales rounded as llama.cpp rounds them): F16C's
// instructions where the build has them (x86-64-v3 does), dtype.h's
// portable conversions elsewhere; the same values either way.
#pragma once
#include <cstdint>
#include <cstring>

#include "kiln/core/dtype.h"
#ifdef __F16C__
// (GCC 12 warns inside its own AVX-512 headers: see kiln/cpu/x86_intrinsics.h.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace kiln {

inline float half_to_float(uint16_t h) {
#ifdef __F16C__
  return _cvtsh_ss(h);
#else
  return f16_to_float(h);
#endif
}

// `f` rounded to the nearest f16 (ties to even), as an f32.
inline float round_to_half(float f) {
#ifdef __F16C__
  return _cvtsh_ss(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
  return f16_to_float(float_to_f16(f));
#endif
}

// The f16 stored at p (unaligned, little-endian: a GGUF block's scale).
inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

}  // namespace kiln
