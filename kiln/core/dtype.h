// Element types. f64 exists as the reference for gradient checks; bf16/f16
// are storage types for mixed precision (the CPU computes in f32/f64).
#pragma once
#include <bit>
#include <cstdint>
#include <string>

namespace kiln {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, u8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);           // "f32", "bf16", ...
const char* dtype_safetensors_name(DType t);  // "F32", "BF16", ...
DType dtype_from_safetensors_name(const std::string& name);  // throws on unknown
DType dtype_parse(const std::string& name);  // "f32", "float32", "bf16", ...
bool dtype_is_floating(DType t);

// bf16 is the top half of an f32; rounding to nearest even on the way down,
// a NaN kept a (quiet) NaN. Both branch-free, so loops of them vectorise.
inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return uint16_t((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
// IEEE half precision, exactly, rounding to nearest even on the way down:
// written out (dtype.cpp), and where the build targets F16C (x86-64-v3
// does) one instruction each (GCC compiles _Float16's conversions to
// vcvtph2ps and vcvtps2ph): the CPU's f16 kernels convert every element,
// and the written-out loops made an f16 model's elementwise ops 10x slower
// than its bf16 ones. The two differ only in a NaN's payload. (CUDA's host
// passes keep the written-out ones: nvcc's front end may not know _Float16.)
float f16_to_float_portable(uint16_t h);
uint16_t float_to_f16_portable(float f);
#if defined(__F16C__) && defined(__FLT16_MAX__) && !defined(__CUDACC__)
inline float f16_to_float(uint16_t h) { return float(std::bit_cast<_Float16>(h)); }
inline uint16_t float_to_f16(float f) { return std::bit_cast<uint16_t>(_Float16(f)); }
#else
inline float f16_to_float(uint16_t h) { return f16_to_float_portable(h); }
inline uint16_t float_to_f16(float f) { return float_to_f16_portable(f); }
#endif

}  // namespace kiln
