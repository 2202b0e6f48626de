// Element types. f64 exists as the reference for gradient checks; bf16/f16
// are storage types for mixed precision (the CPU computes in f32/f64).
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
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
// IEEE half precision, exactly, rounding to nearest even on the way down (a
// NaN kept a quiet NaN): branch-free bit arithmetic and two float operations
// each way (Maratyszcza's FP16 library's method), so loops of them
// vectorise. GCC 12 compiles _Float16's conversions to F16C's instructions
// one element at a time and then vectorises nothing around them, which made
// an f16 model's elementwise ops several times slower than its bf16 ones.
// These equal F16C's instructions on every half and every float, NaN
// payloads aside (Amp.F16ConversionsAreF16CsInstructions). They need IEEE
// float arithmetic in round-to-nearest without flushing subnormals, as Kiln
// builds it (no -ffast-math).
inline float f16_to_float(uint16_t h) {
  const uint32_t doubled = uint32_t(h) << 17;  // exponent and mantissa, the sign shifted out
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  // Normal halves: the bits moved into a float's places with the exponent
  // rebiased by 2^112 too much, then scaled back (exact; Inf/NaN stay so).
  const float normal = std::bit_cast<float>((doubled >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  // Subnormal halves: the mantissa under 0.5's exponent, less 0.5 (exact).
  const float subnormal = std::bit_cast<float>((doubled >> 17) | (126u << 23)) - 0.5f;
  const uint32_t magnitude =
      doubled < (1u << 27) ? std::bit_cast<uint32_t>(subnormal) : std::bit_cast<uint32_t>(normal);
  return std::bit_cast<float>(sign | magnitude);
}
inline uint16_t float_to_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t doubled = bits + bits;  // sign shifted out
  // Scaling up then down sends what overflows a half to Inf; adding a power
  // of two just above the value rounds its mantissa to a half's 10 bits (to
  // nearest even, by the FPU), subnormal halves included.
  const float scaled = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t exponent = std::max(doubled & 0xFF000000u, 0x71000000u);
  const uint32_t rounded = std::bit_cast<uint32_t>(std::bit_cast<float>((exponent >> 1) + 0x07800000u) + scaled);
  const uint32_t magnitude = ((rounded >> 13) & 0x7C00u) + (rounded & 0x0FFFu);
  return uint16_t(((bits >> 16) & 0x8000u) | (doubled > 0xFF000000u ? 0x7E00u : magnitude));
}

}  // namespace kiln
