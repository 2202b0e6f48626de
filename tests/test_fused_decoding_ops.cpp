// The fused ops of a Llama layer's decoding step: rotary (RoPE), rms_norm
// and silu_mul (SwiGLU), each against the unfused steps transformers
// writes, in every float dtype. Their gradients are checked with the other ops (test_ops.cpp).
#include <cmath>

#include "op_test_util.h"

namespace kiln {
namespace {

using testing::random_tensor;

// transformers' rotate_half: [..., D] -> [..., D], the halves swapped, the second negated.
Tensor rotate_half(const Tensor& x) {
  const int64_t D = x.size(-1);
  return cat({neg(slice(x, -1, D / 2, D)), slice(x, -1, 0, D / 2)}, -1);
}

// x * cos + rotate_half(x) * sin over the first cos.size(-1) dims, the rest as they are.
Tensor rotary_unfused(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t R = cos.size(-1), D = x.size(-1);
  const Tensor part = slice(x, -1, 0, R), rotated = part * cos + rotate_half(part) * sin;
  return R == D ? rotated : cat({rotated, slice(x, -1, R, D)}, -1);
}

std::vector<float> values(const Tensor& t) { return to_dtype(t, DType::f32).to_vector<float>(); }

TEST(FusedDecodingOps, RotaryGivesTheUnfusedOpsBitsInEveryDtype) {
  const int64_t B = 2, H = 3, T = 5, D = 8;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    auto in = [&](const Tensor& t) { return to_dtype(t, dtype); };
    const Tensor x = in(random_tensor({B, H, T, D}, 1, DType::f32, -3, 3));
    // Heads as Llama makes them: a transposed view of [B, T, H, D].
    const Tensor heads = transpose(in(random_tensor({B, T, H, D}, 2, DType::f32, -3, 3)), 1, 2);
    for (int64_t R : {D, int64_t(6)}) {  // every dim rotated, and part of them (partial_rotary_factor)
      SCOPED_TRACE(R);
      const Tensor cos = in(random_tensor({T, R}, 3, DType::f32)), sin = in(random_tensor({T, R}, 4, DType::f32));
      EXPECT_EQ(values(rotary(x, cos, sin)), values(rotary_unfused(x, cos, sin)));
      EXPECT_EQ(values(rotary(heads, cos, sin)), values(rotary_unfused(heads, cos, sin)));
      // A row's own position (continuous batching): [B, 1, 1, R] against [B, H, 1, D].
      const Tensor one = slice(x, 2, 0, 1);
      const Tensor row_cos = in(random_tensor({B, 1, 1, R}, 5, DType::f32));
      const Tensor row_sin = in(random_tensor({B, 1, 1, R}, 6, DType::f32));
      EXPECT_EQ(values(rotary(one, row_cos, row_sin)), values(rotary_unfused(one, row_cos, row_sin)));
    }
  }
}

TEST(FusedDecodingOps, RotaryPromotesMixedDtypesAsTheUnfusedProductsDo) {
  // Autocast's bf16 projections against the stream's f32 tables give f32.
  const Tensor q = to_dtype(random_tensor({1, 2, 3, 4}, 7, DType::f32, -2, 2), DType::bf16);
  const Tensor cos = random_tensor({3, 4}, 8, DType::f32), sin = random_tensor({3, 4}, 9, DType::f32);
  const Tensor fused = rotary(q, cos, sin);
  EXPECT_EQ(fused.dtype(), DType::f32);
  EXPECT_EQ(values(fused), values(rotary_unfused(to_dtype(q, DType::f32), cos, sin)));
}

TEST(FusedDecodingOps, RotaryRefusesTablesThatDoNotFit) {
  const Tensor x = random_tensor({2, 3, 4}, 10, DType::f32);
  EXPECT_THROW(rotary(x, random_tensor({3, 5}, 11, DType::f32), random_tensor({3, 5}, 12, DType::f32)), Error);  // odd
  EXPECT_THROW(rotary(x, random_tensor({3, 6}, 11, DType::f32), random_tensor({3, 6}, 12, DType::f32)), Error);  // wide
  EXPECT_THROW(rotary(x, random_tensor({4, 4}, 11, DType::f32), random_tensor({4, 4}, 12, DType::f32)), Error);  // T
  EXPECT_THROW(rotary(x, random_tensor({3, 4}, 11, DType::f32), random_tensor({3, 2}, 12, DType::f32)), Error);
}

TEST(FusedDecodingOps, SiluMulGivesTheUnfusedOpsBitsInEveryDtype) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // A fused gate_up projection's halves (Phi-3): strided views, as the MLP slices them.
    const Tensor gate_up = to_dtype(random_tensor({3, 7, 2 * 96}, 20, DType::f32, -6, 6), dtype);
    const Tensor gate = slice(gate_up, -1, 0, 96), up = slice(gate_up, -1, 96, 192);
    EXPECT_EQ(values(silu_mul(gate, up)), values(gate * sigmoid(gate) * up));
  }
  // Mixed dtypes: SiLU in the gate's dtype, then the promoting product.
  const Tensor gate = to_dtype(random_tensor({4, 8}, 21, DType::f32, -3, 3), DType::bf16);
  const Tensor up = random_tensor({4, 8}, 22, DType::f32);
  const Tensor fused = silu_mul(gate, up);
  EXPECT_EQ(fused.dtype(), DType::f32);
  EXPECT_EQ(values(fused), values(to_dtype(gate * sigmoid(gate), DType::f32) * up));
  EXPECT_THROW(silu_mul(up, random_tensor({4, 7}, 23, DType::f32)), Error);
}

// transformers' LlamaRMSNorm (plus_one: GemmaRMSNorm) step by step: in f32,
// x * rsqrt(mean(x^2) + eps); Llama casts to the weight's dtype before the
// product, Gemma after (1 + weight).
Tensor rms_norm_unfused(const Tensor& x, const Tensor& w, double eps, bool plus_one) {
  const Tensor x32 = to_dtype(x, DType::f32);
  const Tensor normed = x32 * pow_scalar(add_scalar(mean(square(x32), {-1}, true), eps), -0.5);
  if (plus_one) return to_dtype(normed * add_scalar(to_dtype(w, DType::f32), 1), x.dtype());
  return to_dtype(normed, w.dtype()) * w;
}

TEST(FusedDecodingOps, RmsNormRoundsWhereTransformersRounds) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (bool plus_one : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (plus_one ? " plus one" : ""));
      const Tensor x = to_dtype(random_tensor({7, 576}, 13, DType::f32, -4, 4), dtype);
      const Tensor w = to_dtype(random_tensor({576}, 14, DType::f32, 0.5, 1.5), dtype);
      const Tensor fused = rms_norm(x, w, 1e-5, plus_one);
      EXPECT_EQ(fused.dtype(), dtype);
      const std::vector<float> got = values(fused), want = values(rms_norm_unfused(x, w, 1e-5, plus_one));
      // The sums of squares add in another order: f32 differs in the last
      // bits; bf16/f16 round those to the same value but for a few ties,
      // and never by more than one step of the type.
      const double step = dtype == DType::f32 ? 1e-6 : dtype == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
      size_t same = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], step * std::abs(want[i]) + 1e-30) << i;
        same += got[i] == want[i];
      }
      if (dtype != DType::f32) {
        EXPECT_GT(double(same), 0.98 * double(got.size()));
      }
    }
  }
}

TEST(FusedDecodingOps, RmsNormRefusesAWeightOfAnotherSizeOrDtype) {
  const Tensor x = random_tensor({2, 6}, 15, DType::f32);
  EXPECT_THROW(rms_norm(x, random_tensor({5}, 16, DType::f32), 1e-5), Error);
  EXPECT_THROW(rms_norm(x, to_dtype(random_tensor({6}, 16, DType::f32), DType::bf16), 1e-5), Error);
}

}  // namespace
}  // namespace kiln
