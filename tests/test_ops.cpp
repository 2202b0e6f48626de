// Every differentiable op: forward in f32 against the f64 reference (also on
// strided inputs), and backward against f64 finite differences (also on
// strided inputs).
#include "op_test_util.h"
#include "kiln/backend/matmul_precision.h"

namespace kiln {
namespace {

using testing::check_forward_f32_vs_f64;
using testing::gradcheck;
using testing::noncontiguous;
using testing::OpFn;
using testing::random_tensor;

struct OpCase {
  std::string name;
  OpFn fn;
  std::vector<Shape> shapes;
  double lo = -1.0, hi = 1.0;
  double forward_tol = 1e-5;
};

std::vector<OpCase> elementwise_cases() {
  return {
      {"add_broadcast", [](auto& x) { return add(x[0], x[1]); }, {{3, 4}, {4}}},
      {"sub_broadcast", [](auto& x) { return sub(x[0], x[1]); }, {{2, 1, 3}, {4, 1}}},
      {"mul_broadcast", [](auto& x) { return mul(x[0], x[1]); }, {{3, 4}, {3, 1}}},
      {"div", [](auto& x) { return div(x[0], x[1]); }, {{3, 5}, {3, 5}}, 0.5, 2.0},
      {"maximum", [](auto& x) { return maximum(x[0], x[1]); }, {{4, 3}, {4, 3}}},
      {"add_scalar", [](auto& x) { return add_scalar(x[0], 1.5); }, {{7}}},
      {"mul_scalar", [](auto& x) { return mul_scalar(x[0], -2.5); }, {{2, 3}}},
      {"pow_scalar", [](auto& x) { return pow_scalar(x[0], 3.0); }, {{5, 2}}, 0.2, 1.5},
      {"neg", [](auto& x) { return neg(x[0]); }, {{3, 3}}},
      {"exp", [](auto& x) { return exp(x[0]); }, {{4, 5}}},
      {"log", [](auto& x) { return log(x[0]); }, {{4, 5}}, 0.3, 3.0},
      {"sqrt", [](auto& x) { return sqrt(x[0]); }, {{4, 5}}, 0.3, 3.0},
      {"square", [](auto& x) { return square(x[0]); }, {{6}}},
      {"tanh", [](auto& x) { return tanh(x[0]); }, {{3, 7}}},
      {"sigmoid", [](auto& x) { return sigmoid(x[0]); }, {{3, 7}}},
      {"relu", [](auto& x) { return relu(x[0]); }, {{5, 5}}},
      {"gelu", [](auto& x) { return gelu(x[0]); }, {{5, 5}}, -3.0, 3.0},
      {"gelu_erf", [](auto& x) { return gelu_erf(x[0]); }, {{5, 5}}, -3.0, 3.0},
  };
}

std::vector<OpCase> reduction_and_shape_cases() {
  return {
      {"sum_all", [](auto& x) { return sum(x[0]); }, {{3, 4}}},
      {"sum_dim0", [](auto& x) { return sum(x[0], {0}); }, {{3, 4, 2}}},
      {"sum_dims_keep", [](auto& x) { return sum(x[0], {0, 2}, true); }, {{3, 4, 2}}},
      {"mean_last", [](auto& x) { return mean(x[0], {-1}); }, {{3, 5}}},
      {"amax_dim1", [](auto& x) { return amax(x[0], {1}); }, {{4, 6}}},
      {"reshape", [](auto& x) { return reshape(x[0], {4, -1}); }, {{2, 6}}},
      {"transpose", [](auto& x) { return mul(transpose(x[0], 0, 1), x[1]); }, {{3, 4}, {4, 3}}},
      {"permute", [](auto& x) { return permute(x[0], {2, 0, 1}); }, {{2, 3, 4}}},
      {"slice", [](auto& x) { return slice(x[0], 1, 1, 6, 2); }, {{3, 7}}},
      {"expand", [](auto& x) { return expand(x[0], {4, 3, 5}); }, {{3, 1}}},
      {"unsqueeze_squeeze", [](auto& x) { return squeeze(unsqueeze(x[0], 1), 1); }, {{3, 4}}},
      {"cat", [](auto& x) { return cat({x[0], x[1]}, 1); }, {{2, 3}, {2, 4}}},
      {"contiguous", [](auto& x) { return contiguous(transpose(x[0], 0, 1)); }, {{3, 5}}},
      {"matmul", [](auto& x) { return matmul(x[0], x[1]); }, {{3, 4}, {4, 5}}},
      {"matmul_batched_broadcast", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 3, 4}, {4, 2}}},
      {"matmul_transposed", [](auto& x) { return matmul(transpose(x[0], -1, -2), x[1]); }, {{2, 4, 3}, {2, 4, 5}}},
      {"linear", [](auto& x) { return linear(x[0], x[1], x[2]); }, {{2, 3, 4}, {5, 4}, {5}}},
  };
}

// A fixed cos- or sin-like table [T, R] (each of R / 2 values twice, as
// cat(freqs, freqs)) in x's dtype on x's device, taking no gradient.
Tensor rope_table(int64_t T, int64_t R, double phase, const Tensor& like) {
  std::vector<double> v;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < R; ++i) v.push_back(std::cos(phase + 0.7 * double(t + 1) * double(i % (R / 2) + 1)));
  return to_dtype(Tensor::from_vector(v, {T, R}), like.dtype()).to(like.device());
}

std::vector<OpCase> nn_cases() {
  return {
      {"softmax_last", [](auto& x) { return softmax(x[0], -1); }, {{3, 7}}},
      {"softmax_dim0", [](auto& x) { return softmax(x[0], 0); }, {{4, 3}}},
      {"log_softmax", [](auto& x) { return log_softmax(x[0], -1); }, {{3, 7}}},
      {"layer_norm", [](auto& x) { return layer_norm(x[0], x[1], x[2]); }, {{2, 3, 6}, {6}, {6}}},
      {"silu_mul", [](auto& x) { return silu_mul(x[0], x[1]); }, {{3, 5}, {3, 5}}, -3.0, 3.0},
      {"rms_norm", [](auto& x) { return rms_norm(x[0], x[1], 1e-5); }, {{2, 3, 6}, {6}}},
      {"rms_norm_plus_one", [](auto& x) { return rms_norm(x[0], x[1], 1e-6, true); }, {{4, 5}, {5}}},
      // Tables as Llama passes them: [T, R] shared by every head, and a row's own [B, 1, 1, R]; R < D rotates part.
      {"rotary", [](auto& x) { return rotary(x[0], rope_table(3, 4, 0.0, x[0]), rope_table(3, 4, 1.0, x[0])); },
       {{2, 2, 3, 6}}},
      {"rotary_per_row",
       [](auto& x) {
         return rotary(x[0], reshape(rope_table(2, 4, 0.5, x[0]), {2, 1, 1, 4}),
                       reshape(rope_table(2, 4, 1.5, x[0]), {2, 1, 1, 4}));
       },
       {{2, 3, 1, 4}}},
      {"conv2d", [](auto& x) { return conv2d(x[0], x[1], x[2], 1, 1); }, {{2, 2, 5, 5}, {3, 2, 3, 3}, {3}}},
      {"conv2d_stride2", [](auto& x) { return conv2d(x[0], x[1], Tensor(), 2, 0); }, {{1, 3, 7, 6}, {2, 3, 3, 2}}},
      {"max_pool2d", [](auto& x) { return max_pool2d(x[0], 2); }, {{2, 2, 4, 6}}},
      {"attention", [](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], false); },
       {{1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}}},
      {"attention_causal", [](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); },
       {{2, 1, 5, 3}, {2, 1, 5, 3}, {2, 1, 5, 3}}},
      {"attention_packed", [](auto& x) { return scaled_dot_product_attention_packed(x[0], 2, true); }, {{2, 5, 12}}},
  };
}

void run_cases(const std::vector<OpCase>& cases) {
  for (const OpCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> inputs;
    uint64_t seed = 1;
    for (const Shape& s : c.shapes) inputs.push_back(random_tensor(s, seed++, DType::f64, c.lo, c.hi));
    check_forward_f32_vs_f64(c.fn, inputs, c.forward_tol);
    gradcheck(c.fn, inputs);
    std::vector<Tensor> strided;
    for (const Tensor& t : inputs) strided.push_back(noncontiguous(t));
    gradcheck(c.fn, strided);
  }
}

TEST(Ops, ElementwiseForwardAndGradients) { run_cases(elementwise_cases()); }
TEST(Ops, ReductionAndShapeForwardAndGradients) { run_cases(reduction_and_shape_cases()); }
TEST(Ops, NnForwardAndGradients) { run_cases(nn_cases()); }

// Attention reads views as they are where their rows are contiguous: keys
// and values shared by every head (stride 0 over heads), a one-position
// query, and an expanded (stride 0) sequence give what contiguous copies give.
TEST(Ops, AttentionOfViewsEqualsAttentionOfContiguousCopies) {
  const int64_t B = 2, H = 3, T = 5, D = 4;
  Tensor q = random_tensor({B, H, T, D}, 7, DType::f32);
  Tensor kv = random_tensor({B, 1, T, D}, 8, DType::f32);
  Tensor shared = expand(kv, {B, H, T, D});
  EXPECT_EQ(scaled_dot_product_attention(q, shared, shared, true).to_vector<float>(),
            scaled_dot_product_attention(q, contiguous(shared), contiguous(shared), true).to_vector<float>());
  Tensor one = slice(q, 2, 4, 5);  // [B, H, 1, D], rows T * D apart
  EXPECT_EQ(scaled_dot_product_attention(one, one, one, false).to_vector<float>(),
            scaled_dot_product_attention(contiguous(one), contiguous(one), contiguous(one), false).to_vector<float>());
  Tensor same_row = expand(slice(q, 2, 0, 1), {B, H, T, D});  // every position the same row: stride 0 over T
  EXPECT_EQ(scaled_dot_product_attention(same_row, q, q, true).to_vector<float>(),
            scaled_dot_product_attention(contiguous(same_row), q, q, true).to_vector<float>());
}

// The packed op is the plain one on q, k, v split out of the projection: the
// same output and the same gradient, in f32 and in bf16.
TEST(Ops, PackedAttentionEqualsAttentionOfTheSplitProjection) {
  const int64_t B = 2, T = 7, H = 2, D = 4, C = H * D;
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor packed = to_dtype(random_tensor({B, T, 3 * C}, 3, DType::f32), dtype).detach();
    Tensor upstream = to_dtype(random_tensor({B, H, T, D}, 4, DType::f32), dtype);
    packed.set_requires_grad(true);
    Tensor out = scaled_dot_product_attention_packed(packed, H, true);
    sum(mul(out, upstream)).backward();
    Tensor split = packed.detach();
    split.set_requires_grad(true);
    Tensor qkv = permute(reshape(split, {B, T, 3, H, D}), {2, 0, 3, 1, 4});
    auto part = [&](int64_t i) { return contiguous(squeeze(slice(qkv, 0, i, i + 1), 0)); };
    Tensor ref = scaled_dot_product_attention(part(0), part(1), part(2), true);
    sum(mul(ref, upstream)).backward();
    EXPECT_EQ(to_dtype(out, DType::f32).to_vector<float>(), to_dtype(ref, DType::f32).to_vector<float>());
    EXPECT_EQ(to_dtype(packed.grad(), DType::f32).to_vector<float>(),
              to_dtype(split.grad(), DType::f32).to_vector<float>());
  }
}

TEST(Ops, CrossEntropyMatchesLogSoftmaxAndGradchecks) {
  Tensor logits = random_tensor({5, 7}, 3, DType::f64, -2, 2);
  Tensor targets = Tensor::from_vector<int64_t>({0, 6, 3, -100, 2}, {5});
  {
    NoGradGuard ng;
    // Independent reference: -mean over valid rows of log_softmax[target].
    std::vector<double> ls = log_softmax(logits).to_vector<double>();
    double expected = -(ls[0 * 7 + 0] + ls[1 * 7 + 6] + ls[2 * 7 + 3] + ls[4 * 7 + 2]) / 4.0;
    EXPECT_NEAR(cross_entropy(logits, targets).item(), expected, 1e-12);
    EXPECT_NEAR(cross_entropy(to_dtype(logits, DType::f32), targets).item(), expected, 1e-5);
  }
  gradcheck([&](auto& x) { return cross_entropy(x[0], targets); }, {logits});
  gradcheck([&](auto& x) { return cross_entropy(x[0], targets); }, {noncontiguous(logits)});
}

TEST(Ops, EmbeddingGradchecks) {
  Tensor weight = random_tensor({6, 4}, 5);
  Tensor ids = Tensor::from_vector<int64_t>({1, 5, 1, 0, 3, 3}, {2, 3});
  check_forward_f32_vs_f64([&](auto& x) { return embedding(x[0], ids); }, {weight});
  gradcheck([&](auto& x) { return embedding(x[0], ids); }, {weight});
  EXPECT_THROW(embedding(weight, Tensor::from_vector<int64_t>({6}, {1})), Error);
}

TEST(Ops, DropoutUsesTheSameMaskForwardAndBackward) {
  Tensor x = random_tensor({8, 16}, 7);
  OpFn f = [](auto& in) {
    Generator gen(42);
    return dropout(in[0], 0.3, gen);
  };
  gradcheck(f, {x});
  NoGradGuard ng;
  std::vector<double> y = f({x}).to_vector<double>(), xv = x.to_vector<double>();
  int kept = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] != 0) {
      ++kept;
      EXPECT_NEAR(y[i], xv[i] / 0.7, 1e-6);
    }
  }
  EXPECT_GT(kept, 60);
  EXPECT_LT(kept, 120);
}

TEST(Ops, ToDtypeRoundTripsAndPassesGradients) {
  Tensor x = random_tensor({3, 4}, 11);
  gradcheck([](auto& in) { return to_dtype(to_dtype(in[0], DType::f32), DType::f64); }, {x}, {}, 1e-3, 1e-3);
  NoGradGuard ng;
  Tensor b = to_dtype(to_dtype(x, DType::bf16), DType::f64);
  EXPECT_LT(testing::max_abs_diff(b, x), 1e-2);
  Tensor h = to_dtype(to_dtype(x, DType::f16), DType::f64);
  EXPECT_LT(testing::max_abs_diff(h, x), 1e-3);
}

// The f32 matmul precision is a GPU setting (TF32 or not): the CPU's
// products are the same bits under either, and the names parse as PyTorch's.
TEST(Ops, Float32MatmulPrecisionLeavesTheCpuAlone) {
  EXPECT_EQ(float32_matmul_precision(), Float32MatmulPrecision::high);  // TF32 on the GPU by default
  EXPECT_EQ(parse_float32_matmul_precision("highest"), Float32MatmulPrecision::highest);
  EXPECT_EQ(parse_float32_matmul_precision("high"), Float32MatmulPrecision::high);
  EXPECT_THROW(parse_float32_matmul_precision("medium"), Error);
  Tensor a = random_tensor({33, 70}, 3, DType::f32), b = random_tensor({70, 9}, 4, DType::f32);
  const std::vector<float> tf32_setting = matmul(a, b).to_vector<float>();
  set_float32_matmul_precision(Float32MatmulPrecision::highest);
  const std::vector<float> f32_setting = matmul(a, b).to_vector<float>();
  set_float32_matmul_precision(Float32MatmulPrecision::high);
  EXPECT_EQ(tf32_setting, f32_setting);
}

}  // namespace
}  // namespace kiln
