#pragma once
// exp in plain arithmetic, for loops that must vectorise (kiln/cpu's
// kernels, and sampling over a vocabulary).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kiln {

// exp for f32 in plain arithmetic (Cephes' polynomial, ~1 ulp), so loops
// that call it vectorise; libm's scalar expf/tanhf took a third of a GPT
// training step. f64 (the gradient-check reference) keeps std::exp.
// The clamp keeps 2^n representable and the result normal: clamped at
// ln(FLT_MIN) itself, the product below came out subnormal, and each such
// product costs the CPU a microcode assist (~10x the whole loop's time when
// most inputs are -inf, as for the tokens a grammar masks out). Inputs
// between -87.34 and -87.3 give exp(-87.3) (at most 3.7% high, at 1.2e-38).
// The selects after it (branch-free, so the loop still vectorises) give NaN
// for NaN, 0 below the normal range (and for -inf), and inf for +inf, as
// expf does: a clamp alone would turn NaN and -inf into 1.2e-38 and hide a
// blow-up.
inline float fast_exp(float x) {
  float c = std::min(88.3762626647949f, std::max(-87.3f, x));
  float n = std::floor(c * 1.44269504088896341f + 0.5f);
  float g = c - n * 0.693359375f + n * 2.12194440e-4f;
  float y = ((((1.9875691500E-4f * g + 1.3981999507E-3f) * g + 8.3334519073E-3f) * g + 4.1665795894E-2f) * g +
             1.6666665459E-1f) * g + 5.0000001201E-1f;
  y = y * g * g + g + 1.0f;
  int32_t bits = (int32_t(n) + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, 4);
  float r = y * scale;
  r = x < -87.3365447504f ? 0.0f : r;
  r = x == std::numeric_limits<float>::infinity() ? x : r;
  return x != x ? x : r;
}

inline double fast_exp(double x) { return std::exp(x); }

// erfc(z) for z >= 0 in plain arithmetic (so loops over it vectorise; libm's
// scalar erff, with the expf it calls past 0.84, was a third of an
// encoder's time): t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), P a degree-10
// polynomial fitted here (least squares against mpmath's erfc on [0, 10]):
// within 2.4e-8 relative in exact arithmetic, ~3e-7 in f32 (fast_exp's and
// the squares' rounding). Relative, so 1 + erf(x) = erfc(-x) stays accurate
// where it is small (GELU's negative side).
inline float fast_erfc_nonnegative(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = -0.13222319652034395f;
  for (float c : {0.9186638637314601f, -2.6606326682147237f, 4.06619584253669f, -3.408038839568643f,
                  1.5898021489983114f, -0.6849140292426042f, 0.21977999254597488f, 0.3553098921485502f,
                  1.0016277038125974f, -1.265570686346065f})
    p = p * t + c;
  return t * fast_exp(-z * z + p);
}

}  // namespace kiln
