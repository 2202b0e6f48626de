// Mixed precision: the dynamic loss scaler's policy, the autocast policy,
// float type promotion, and bf16/f16 ops on the CPU (compute in f32, round
// once). Recipe-level runs are in test_amp_recipes.cpp.
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <limits>
#include <thread>

#include "op_test_util.h"
#include "apps/recipes/precision.h"
#include "kiln/amp/autocast.h"
#include "kiln/amp/grad_scaler.h"
#include "kiln/backend/factory.h"
#include "kiln/cpu/gemm.h"
#include "kiln/cpu/low_precision.h"
#include "kiln/optim/optimizer.h"
#include "models/gpt/gpt.h"

namespace kiln {
namespace {

using amp::AutocastGuard;
using amp::DynamicLossScaler;
using testing::random_tensor;

// ||a - b|| / ||b||, in f64.
double relative_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// ---- loss scaler policy

TEST(Amp, ScalerGrowsAfterExactlyGrowthIntervalCleanSteps) {
  DynamicLossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 1999);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  for (int i = 0; i < 2000; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 262144.0);
}

TEST(Amp, ScalerBacksOffOnInfAndRestartsTheCount) {
  DynamicLossScaler s;
  for (int i = 0; i < 1500; ++i) s.update(false);
  s.update(true);
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 32768.0);  // the 1500 clean steps before the inf do not count
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  // Repeated overflow never drives the scale to zero.
  for (int i = 0; i < 200; ++i) s.update(true);
  EXPECT_EQ(s.scale(), s.options().min_scale);
  EXPECT_GT(s.scale(), 0.0);
  EXPECT_THROW(DynamicLossScaler{amp::LossScalerOptions{.init_scale = 0}}, Error);
}

TEST(Amp, ScalerUnscalesGradientsAndDetectsInfAndNan) {
  DynamicLossScaler s;
  Tensor a = ones({3}).set_requires_grad(), b = ones({2, 2}).set_requires_grad(), unused = ones({4});
  a.set_grad(Tensor::from_vector<float>({65536.f, -131072.f, 32768.f}, {3}));
  b.set_grad(Tensor::from_vector<float>({0.f, 1.f, 2.f, 3.f}, {2, 2}));
  EXPECT_TRUE(s.unscale_and_check(optim::gradients_of({a, b, unused})));
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{1.f, -2.f, 0.5f}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{0.f, 1.f / 65536, 2.f / 65536, 3.f / 65536}));

  const float bad[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()};
  for (float v : bad) {
    a.set_grad(Tensor::from_vector<float>({1.f, v, 1.f}, {3}));
    b.set_grad(ones({2, 2}));
    EXPECT_FALSE(s.unscale_and_check(optim::gradients_of({a, b}))) << v;
  }
  // Large but finite gradients are not mistaken for overflow (sum(g) would be inf).
  a.set_grad(Tensor::from_vector<float>({3e38f, 3e38f, 3e38f}, {3}));
  EXPECT_TRUE(DynamicLossScaler(amp::LossScalerOptions{.init_scale = 1}).unscale_and_check(optim::gradients_of({a})));
}

TEST(Amp, ScalerStateRoundTripsThroughJson) {
  DynamicLossScaler s;
  s.update(true);
  for (int i = 0; i < 37; ++i) s.update(false);
  nlohmann::json j = nlohmann::json::parse(s.state().dump());
  DynamicLossScaler r;
  r.load_state(j);
  EXPECT_EQ(r.scale(), 32768.0);
  EXPECT_EQ(r.growth_tracker(), 37);
  for (int i = 0; i < 1963; ++i) r.update(false), s.update(false);
  EXPECT_EQ(r.scale(), 65536.0);
  EXPECT_EQ(r.scale(), s.scale());
  EXPECT_THROW(r.load_state(nlohmann::json{{"scale", 1.0}}), Error);
  EXPECT_THROW(r.load_state(nlohmann::json{{"scale", -1.0}, {"growth_tracker", 0}}), Error);
}

// An f16 step whose scaled gradient overflows is skipped (no update, logged),
// the scale halves, and the next step goes through.
TEST(Amp, Fp16OverflowSkipsTheStepAndBacksOff) {
  recipes::MixedPrecision mp("fp16");
  Tensor w = full({1, 4}, 0.5).set_requires_grad();
  Tensor x = full({1, 4}, 1.0);
  std::vector<std::string> lines;
  auto log = [&](const std::string& s) { lines.push_back(s); };
  auto loss_fn = [&] {
    AutocastGuard autocast(mp.autocast_dtype());
    return sum(to_dtype(linear(x, w, Tensor()), DType::f32));  // an f32 loss, as cross_entropy gives
  };
  // The scaled d(loss)/d(y) is 65536, past f16's largest finite value (65504).
  EXPECT_FALSE(mp.backward(loss_fn(), {w}, 7, log));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "step 7: skipped, inf/NaN gradients; loss scale -> 32768");
  EXPECT_EQ(mp.skipped_steps(), 1);
  w.zero_grad();
  EXPECT_TRUE(mp.backward(loss_fn(), {w}, 8, log));
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1.f, 1.f, 1.f, 1.f}));  // unscaled
  EXPECT_EQ(lines.size(), 1u);
  nlohmann::json state;
  mp.save(state);
  EXPECT_EQ(state.at("precision"), "fp16");
  EXPECT_EQ(state.at("loss_scaler").at("scale"), 32768.0);
  EXPECT_THROW(recipes::MixedPrecision("fp8"), Error);
}

// ---- autocast policy

TEST(Amp, AutocastLowersMatrixProductsAndKeepsSensitiveOpsInF32) {
  Tensor x = random_tensor({4, 8}, 1, DType::f32), w = random_tensor({6, 8}, 2, DType::f32);
  Tensor b = random_tensor({6}, 3, DType::f32);
  Tensor img = random_tensor({1, 2, 5, 5}, 4, DType::f32), k = random_tensor({3, 2, 3, 3}, 5, DType::f32);
  Tensor q = random_tensor({1, 2, 4, 8}, 6, DType::f32);
  Tensor targets = Tensor::from_vector<int64_t>({0, 5, 2, 1}, {4});
  for (DType dt : {DType::bf16, DType::f16}) {
    AutocastGuard autocast(dt);
    ASSERT_EQ(amp::autocast_dtype(), dt);
    EXPECT_EQ(linear(x, w, b).dtype(), dt);
    EXPECT_EQ(matmul(x, transpose(w, 0, 1)).dtype(), dt);
    EXPECT_EQ(conv2d(img, k, Tensor(), 1, 1).dtype(), dt);
    EXPECT_EQ(scaled_dot_product_attention(q, q, q, true).dtype(), dt);
    Tensor low = linear(x, w, b);
    EXPECT_EQ(softmax(low).dtype(), DType::f32);
    EXPECT_EQ(log_softmax(low, 0).dtype(), DType::f32);
    EXPECT_EQ(cross_entropy(low, targets).dtype(), DType::f32);
    EXPECT_EQ(layer_norm(low, ones({6}), zeros({6})).dtype(), DType::f32);
    EXPECT_EQ(relu(low).dtype(), dt);                    // elementwise: runs in its input's dtype
    EXPECT_EQ(add(low, b).dtype(), DType::f32);          // promotion
    EXPECT_EQ(matmul(to_dtype(x, DType::f64), to_dtype(w, DType::f64).transpose(0, 1)).dtype(), DType::f64);
    {
      AutocastGuard off(DType::f32);
      EXPECT_FALSE(amp::autocast_dtype().has_value());
      EXPECT_EQ(linear(x, w, b).dtype(), DType::f32);
    }
    EXPECT_EQ(amp::autocast_dtype(), dt);
    // The state is per thread, as torch.autocast's.
    bool other_thread_on = true;
    std::thread([&] { other_thread_on = amp::autocast_dtype().has_value(); }).join();
    EXPECT_FALSE(other_thread_on);
  }
  EXPECT_FALSE(amp::autocast_dtype().has_value());
  EXPECT_EQ(linear(x, w, b).dtype(), DType::f32);
  EXPECT_THROW(AutocastGuard{DType::i32}, Error);
}

// f32 plus bf16/f16 (a residual stream plus a projection's output) adds the
// narrow operand as it is: the bits of promoting it first, forward and
// backward, in either order and broadcast.
TEST(Amp, AddOfF32AndANarrowOperandIsThePromotedAdd) {
  const Tensor wide0 = random_tensor({3, 5}, 21, DType::f32);
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const Tensor& narrow0 : {to_dtype(random_tensor({3, 5}, 22, DType::f32), dt),
                                  to_dtype(random_tensor({5}, 23, DType::f32), dt)}) {
      for (bool wide_first : {true, false}) {
        auto run = [&](bool promote_first) {
          Tensor w = wide0.detach().set_requires_grad(), n = narrow0.detach().set_requires_grad();
          Tensor rhs = promote_first ? to_dtype(n, DType::f32) : n;
          Tensor y = wide_first ? add(w, rhs) : add(rhs, w);
          sum(mul(y, y)).backward();
          return std::vector<Tensor>{y, w.grad(), n.grad()};
        };
        const std::vector<Tensor> got = run(false), want = run(true);
        EXPECT_EQ(got[0].dtype(), DType::f32);
        EXPECT_EQ(got[2].dtype(), dt);
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_EQ(got[i].to_vector<double>(), want[i].to_vector<double>())
              << dtype_name(dt) << " " << shape_str(narrow0.shape()) << " tensor " << i;
      }
    }
  }
}

// layer_norm_for_matmul (GPT blocks' layernorms): under autocast its output
// is layer_norm's output as the product reading it casts it, bit for bit, and
// the gradients that come back through the product are the same bits too.
// Without autocast it is layer_norm.
TEST(Amp, LayerNormForMatmulIsLayerNormThenTheProductsCast) {
  const Tensor x0 = random_tensor({5, 24}, 11, DType::f32), w0 = random_tensor({24}, 12, DType::f32);
  const Tensor b0 = random_tensor({24}, 13, DType::f32), proj = random_tensor({7, 24}, 14, DType::f32);
  for (DType dt : {DType::bf16, DType::f16}) {
    AutocastGuard autocast(dt);
    auto run = [&](bool for_matmul) {
      Tensor x = x0.detach().set_requires_grad(), w = w0.detach().set_requires_grad();
      Tensor b = b0.detach().set_requires_grad();
      Tensor y = for_matmul ? layer_norm_for_matmul(x, w, b) : layer_norm(x, w, b);
      EXPECT_EQ(y.dtype(), for_matmul ? dt : DType::f32);
      Tensor out = linear(y, proj, Tensor());
      sum(mul(out, out)).backward();
      return std::vector<Tensor>{out, x.grad(), w.grad(), b.grad()};
    };
    const std::vector<Tensor> fused = run(true), plain = run(false);
    for (size_t i = 0; i < fused.size(); ++i) {
      EXPECT_EQ(fused[i].dtype(), plain[i].dtype()) << i;
      EXPECT_EQ(fused[i].to_vector<double>(), plain[i].to_vector<double>()) << dtype_name(dt) << " tensor " << i;
    }
  }
  EXPECT_EQ(layer_norm_for_matmul(x0, w0, b0).to_vector<float>(), layer_norm(x0, w0, b0).to_vector<float>());
}

TEST(Amp, AutocastLinearMatchesRoundedInputsInF64) {
  Tensor x = random_tensor({5, 7}, 11, DType::f32), w = random_tensor({3, 7}, 12, DType::f32);
  Tensor y;
  {
    AutocastGuard autocast(DType::bf16);
    y = linear(x, w, Tensor());
  }
  std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>(), yv = y.to_vector<float>();
  for (int i = 0; i < 5; ++i)
    for (int o = 0; o < 3; ++o) {
      double ref = 0;
      for (int k = 0; k < 7; ++k) ref += double(round_bf16(xv[i * 7 + k])) * double(round_bf16(wv[o * 7 + k]));
      EXPECT_NEAR(yv[size_t(i * 3 + o)], ref, std::abs(ref) * 0.004 + 1e-6);  // one bf16 rounding of the output
    }
}

// Loss and the gradients of an MLP's f32 parameters under autocast, against
// the same network in f32.
void check_mlp_gradients(DType dt, double tolerance) {
  Tensor x = random_tensor({16, 24}, 21, DType::f32);
  Tensor targets = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5}, {16});
  std::vector<Tensor> params = {random_tensor({32, 24}, 22, DType::f32), random_tensor({32}, 23, DType::f32),
                                random_tensor({10, 32}, 24, DType::f32), random_tensor({10}, 25, DType::f32)};
  for (Tensor& p : params) p.set_requires_grad();
  auto loss_fn = [&] {
    Tensor h = gelu(linear(x, params[0], params[1]));
    return cross_entropy(linear(h, params[2], params[3]), targets);
  };
  Tensor loss32 = loss_fn();
  loss32.backward();
  std::vector<Tensor> grads32;
  for (Tensor& p : params) grads32.push_back(p.grad()), p.zero_grad();
  Tensor loss;
  {
    AutocastGuard autocast(dt);
    loss = loss_fn();
  }
  EXPECT_EQ(loss.dtype(), DType::f32);
  EXPECT_NE(loss.item(), loss32.item());  // the products really ran in low precision
  EXPECT_NEAR(loss.item(), loss32.item(), tolerance * loss32.item());
  loss.backward();
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined()) << i;
    EXPECT_EQ(params[i].grad().dtype(), DType::f32) << i;
    EXPECT_LT(relative_error(params[i].grad(), grads32[i]), tolerance) << dtype_name(dt) << " param " << i;
  }
}

TEST(Amp, Bf16GradientsReachF32ParamsCloseToF32) { check_mlp_gradients(DType::bf16, 1e-2); }
TEST(Amp, F16GradientsReachF32ParamsCloseToF32) { check_mlp_gradients(DType::f16, 2e-3); }

// The GPT path: embeddings, layernorm, attention, GELU MLP, residual adds and
// the tied output embedding (cast for the logits, f32 for the lookup).
models::Gpt tiny_gpt(int64_t n_layer, uint64_t seed) {
  models::GptConfig c;
  c.vocab_size = 32, c.block_size = 8, c.n_layer = n_layer, c.n_head = 2, c.n_embd = 16;
  Generator init(seed);
  return models::Gpt(c, init, std::make_shared<Generator>(seed + 1));
}

TEST(Amp, GptUnderBf16AutocastMatchesF32) {
  models::Gpt gpt = tiny_gpt(1, 3);
  Tensor ids = Tensor::from_vector<int64_t>({1, 5, 9, 3, 7, 2, 30, 11, 4, 4, 8, 16, 0, 1, 2, 3}, {2, 8});
  Tensor targets = Tensor::from_vector<int64_t>({5, 9, 3, 7, 2, 30, 11, 6, 4, 8, 16, 0, 1, 2, 3, 31}, {2, 8});
  Tensor loss32 = gpt.loss(ids, targets);
  loss32.backward();
  std::map<std::string, Tensor> grads32;
  for (auto& [n, p] : gpt.named_parameters()) grads32[n] = p.grad(), p.zero_grad();
  Tensor loss;
  {
    AutocastGuard autocast(DType::bf16);
    loss = gpt.loss(ids, targets);
  }
  EXPECT_NE(loss.item(), loss32.item());
  EXPECT_NEAR(loss.item(), loss32.item(), 1e-2 * loss32.item());
  loss.backward();
  for (auto& [n, p] : gpt.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << n;
    EXPECT_EQ(p.dtype(), DType::f32) << n;
    EXPECT_EQ(p.grad().dtype(), DType::f32) << n;
    EXPECT_LT(relative_error(p.grad(), grads32[n]), 1e-2) << n;
  }
}

// Serving's weight casts (amp::WeightCastCache): each parameter is cast once
// while the cache is installed, and the answers are those of casting every
// call, bit for bit. Outside its scope nothing is cached.
TEST(Amp, WeightCastCacheCastsEachParameterOnceAndChangesNoAnswer) {
  const int64_t layers = 2;
  models::Gpt gpt = tiny_gpt(layers, 5);
  NoGradGuard no_grad;
  Tensor ids = Tensor::from_vector<int64_t>({1, 5, 9, 3, 7, 2, 30, 11}, {1, 8});
  AutocastGuard autocast(DType::bf16);
  const Tensor uncached = gpt(ids);
  amp::WeightCastCache cache;
  Tensor first, second;
  size_t casts = 0;
  {
    amp::WeightCastCache::Scope scope(cache);
    first = gpt(ids);
    casts = cache.size();
    second = gpt(ids);
  }
  // The weights and biases of the four linears per block, and the tied head: each cast once.
  EXPECT_EQ(casts, size_t(8 * layers + 1));
  EXPECT_EQ(cache.size(), casts);
  EXPECT_EQ(testing::max_abs_diff(first, uncached), 0.0);
  EXPECT_EQ(testing::max_abs_diff(second, uncached), 0.0);
  gpt(ids);
  EXPECT_EQ(cache.size(), casts);  // no scope, no caching
  const Tensor& w = gpt.named_parameters().front().second;
  const Tensor cast = cache.cast(w, DType::bf16);
  EXPECT_TRUE(cast.same_storage(cache.cast(w, DType::bf16)));
  EXPECT_EQ(cast.dtype(), DType::bf16);
  EXPECT_FALSE(cast.requires_grad());
}

// Decoding under autocast keeps its keys and values in the autocast dtype
// (an f32 cache would be cast whole at each step), and answers as an f32
// cache does up to bf16 rounding: the cached values were bf16 products
// either way, and attention over bf16 pages rounds its scores and
// probabilities to bf16 as PyTorch's eager attention does (an f32 pool's
// attention keeps them in f32).
TEST(Amp, GptDecodeUnderAutocastCachesInBf16AndAnswersAsAnF32Cache) {
  models::Gpt gpt = tiny_gpt(2, 7);
  NoGradGuard no_grad;
  models::KvCache f32 = gpt.new_cache();
  EXPECT_EQ(f32.pool().keys(0).dtype(), DType::f32);
  AutocastGuard autocast(DType::bf16);
  models::KvCache low = gpt.new_cache();  // a pool of its own: the layout changed
  EXPECT_NE(&low.pool(), &f32.pool());
  EXPECT_EQ(low.pool().keys(0).dtype(), DType::bf16);
  EXPECT_EQ(low.pool().values(1).dtype(), DType::bf16);
  const Tensor prompt = Tensor::from_vector<int64_t>({3, 1, 4}, {1, 3});
  EXPECT_LT(testing::max_abs_diff(gpt.forward_cached(prompt, low), gpt.forward_cached(prompt, f32)), 1e-6);
  for (int32_t token : {5, 9, 2})
    EXPECT_LT(testing::max_abs_diff(gpt.forward_decode({token}, {&low}), gpt.forward_decode({token}, {&f32})), 2e-3)
        << "token " << token;
}

// ---- type promotion

TEST(Amp, MixedFloatAddPromotesAndEachInputGetsItsOwnGradientDtype) {
  Tensor a = Tensor::from_vector<float>({1.5f, -2.f, 0.25f}, {3}).set_requires_grad();
  Tensor b = to_dtype(Tensor::from_vector<float>({0.5f, 3.f, -1.f}, {3}), DType::bf16).set_requires_grad();
  Tensor y = add(a, b);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2.f, 1.f, -0.75f}));
  sum(mul_scalar(y, 3.0)).backward();
  EXPECT_EQ(a.grad().dtype(), DType::f32);
  EXPECT_EQ(b.grad().dtype(), DType::bf16);
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{3.f, 3.f, 3.f}));

  // mul: f32 * f64 -> f64; d/da = b (back in f32), d/db = a (in f64).
  Tensor c = Tensor::from_vector<float>({2.f, 4.f}, {2}).set_requires_grad();
  Tensor d = Tensor::from_vector<double>({0.1, -3.0}, {2}).set_requires_grad();
  Tensor z = mul(c, d);
  EXPECT_EQ(z.dtype(), DType::f64);
  sum(z).backward();
  EXPECT_EQ(c.grad().dtype(), DType::f32);
  EXPECT_EQ(d.grad().dtype(), DType::f64);
  EXPECT_EQ(c.grad().to_vector<float>(), (std::vector<float>{0.1f, -3.f}));
  EXPECT_EQ(d.grad().to_vector<double>(), (std::vector<double>{2.0, 4.0}));

  // bf16 with f16: neither holds the other, so f32 (as PyTorch).
  EXPECT_EQ(sub(to_dtype(a, DType::bf16), to_dtype(a, DType::f16)).dtype(), DType::f32);
  EXPECT_EQ(div(a, to_dtype(a, DType::f16)).dtype(), DType::f32);
  EXPECT_EQ(maximum(to_dtype(a, DType::f64), a).dtype(), DType::f64);
  // Broadcasting still applies after promotion.
  EXPECT_EQ(add(ones({2, 3}, DType::bf16), a).shape(), (Shape{2, 3}));
  // Float with integer stays an error.
  EXPECT_THROW(add(a, ones({3}, DType::i64)), Error);
  EXPECT_THROW(mul(ones({3}, DType::i32), a), Error);
}

// ---- bf16/f16 ops on the CPU: f32 compute on the rounded values, one rounding

TEST(Amp, CpuLowPrecisionOpsComputeInF32AndRoundOnce) {
  Tensor x32 = random_tensor({3, 5}, 31, DType::f32, -3, 3);
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor x = to_dtype(x32, dt);
    Tensor xr = to_dtype(x, DType::f32);  // the exact values x holds
    auto expect_rounded = [&](const Tensor& low, const Tensor& ref32, const char* what) {
      EXPECT_EQ(low.dtype(), dt) << what;
      EXPECT_EQ(low.to_vector<float>(), to_dtype(ref32, dt).to_vector<float>()) << what << " " << dtype_name(dt);
    };
    expect_rounded(gelu(x), gelu(xr), "gelu");
    expect_rounded(exp(x), exp(xr), "exp");
    expect_rounded(mul_scalar(x, 0.3), mul_scalar(xr, 0.3), "mul_scalar");
    Tensor row = to_dtype(random_tensor({5}, 32, DType::f32), dt);
    expect_rounded(mul(x, row), mul(xr, to_dtype(row, DType::f32)), "broadcast mul");
    expect_rounded(sum(x, {1}), sum(xr, {1}), "sum");
    expect_rounded(amax(transpose(x, 0, 1), {1}), amax(transpose(xr, 0, 1), {1}), "strided amax");
    // GEMM summation order may depend on the transpose flags: compare with
    // f64 on the same values, within one rounding to the output dtype.
    Tensor mm = matmul(x, transpose(x, 0, 1));
    Tensor x64 = to_dtype(x, DType::f64);
    std::vector<double> ref = matmul(x64, transpose(x64, 0, 1)).to_vector<double>();
    std::vector<float> got = mm.to_vector<float>();
    const double rounding = dt == DType::bf16 ? 1.0 / 200 : 1.0 / 1600;  // half an ulp (2^-8, 2^-11), plus slack
    EXPECT_EQ(mm.dtype(), dt);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], std::abs(ref[i]) * rounding + 1e-6) << i;
    expect_rounded(softmax(x), softmax(xr), "softmax");
    EXPECT_EQ(argmax(x, 1).to_vector<int64_t>(), argmax(xr, 1).to_vector<int64_t>());
    Tensor ids = Tensor::from_vector<int64_t>({2, 0, 2}, {3});
    expect_rounded(embedding(x, ids), embedding(xr, ids), "embedding");
    Tensor q = to_dtype(random_tensor({1, 2, 3, 4}, 33, DType::f32), dt);
    Tensor qr = to_dtype(q, DType::f32);
    Tensor heads = scaled_dot_product_attention(q, q, q, true), heads32 = scaled_dot_product_attention(qr, qr, qr, true);
    if (dt == DType::bf16 && cpu::bf16_gemm_available()) {
      // Multiplied as bf16, attention rounds P to bf16 for P V (as flash
      // attention does): within two bf16 roundings of the f32 result.
      std::vector<float> got16 = heads.to_vector<float>(), want = heads32.to_vector<float>();
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got16[i], want[i], std::abs(want[i]) / 128 + 1e-3) << i;
    } else {
      expect_rounded(heads, heads32, "attention");
    }
    Tensor img = to_dtype(random_tensor({1, 1, 4, 4}, 34, DType::f32), dt);
    expect_rounded(max_pool2d(img, 2), max_pool2d(to_dtype(img, DType::f32), 2), "max_pool2d");
  }
}

// bf16 operands on a CPU with bf16 instructions go to oneDNN's bf16 GEMM
// without widening (kiln/cpu/gemm.h): every transpose, a batch, alpha,
// accumulation into out, and the bias + GELU epilogue, against f64 on the
// same rounded values, within one bf16 rounding of the result.
TEST(Amp, CpuBf16GemmMatchesF64OnTheRoundedOperands) {
  if (!cpu::bf16_gemm_available()) GTEST_SKIP() << "this CPU or build has no bf16 GEMM; the f32 path is tested above";
  auto rounded = [](const Shape& shape, uint64_t seed) {
    return to_dtype(random_tensor(shape, seed, DType::f32, -2, 2), DType::bf16);
  };
  auto f64 = [](const Tensor& t) { return to_dtype(t, DType::f64); };
  auto abs = [](const Tensor& t) { return sqrt(square(t)); };
  auto expect_close = [](const Tensor& got, const Tensor& ref, const Tensor& scale, const char* what) {
    std::vector<float> g = got.to_vector<float>();
    std::vector<double> r = ref.to_vector<double>(), sc = scale.to_vector<double>();
    ASSERT_EQ(g.size(), r.size()) << what;
    for (size_t i = 0; i < r.size(); ++i) EXPECT_NEAR(g[i], r[i], sc[i] / 128 + 1e-6) << what << " " << i;
  };
  const int64_t M = 37, K = 53, N = 29;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = ta ? transpose(rounded({K, M}, 1), 0, 1) : rounded({M, K}, 1);
      Tensor b = tb ? transpose(rounded({N, K}, 2), 0, 1) : rounded({K, N}, 2);
      Tensor out = matmul(a, b);
      EXPECT_EQ(out.dtype(), DType::bf16);
      expect_close(out, matmul(f64(a), f64(b)), matmul(abs(f64(a)), abs(f64(b))),
                   ta ? (tb ? "TT" : "TN") : (tb ? "NT" : "NN"));
    }
  Tensor a = rounded({3, M, K}, 3), b = rounded({3, K, N}, 4);
  expect_close(matmul(a, b), matmul(f64(a), f64(b)), matmul(abs(f64(a)), abs(f64(b))), "batched");

  // alpha and accumulation (beta = 1) into a bf16 out, then bias + GELU.
  Tensor a2 = rounded({M, K}, 5), b2 = rounded({K, N}, 6), bias = rounded({N}, 7);
  Tensor acc = rounded({M, N}, 8);
  Tensor expected = add(mul_scalar(matmul(f64(a2), f64(b2)), 0.5), f64(acc));
  MatmulArgs args;
  args.alpha = 0.5f;
  args.beta = 1.0f;
  backend_for(Device::cpu()).matmul(a2, b2, acc, args);
  expect_close(acc, expected, add(mul_scalar(matmul(abs(f64(a2)), abs(f64(b2))), 0.5), abs(expected)), "alpha, beta");
  // A bias alone goes into the bf16 product before its one rounding.
  MatmulArgs with_bias;
  with_bias.bias = bias;
  Tensor yb = Tensor::empty({M, N}, DType::bf16);
  backend_for(Device::cpu()).matmul(a2, b2, yb, with_bias);
  expect_close(yb, add(matmul(f64(a2), f64(b2)), f64(bias)),
               add(matmul(abs(f64(a2)), abs(f64(b2))), abs(f64(bias))), "bias");
  MatmulArgs epilogue;
  epilogue.bias = bias;
  epilogue.gelu = true;
  epilogue.pre_gelu = Tensor::empty({M, N}, DType::bf16);
  Tensor y = Tensor::empty({M, N}, DType::bf16);
  backend_for(Device::cpu()).matmul(a2, b2, y, epilogue);
  Tensor pre = add(matmul(f64(a2), f64(b2)), f64(bias));
  Tensor pre_scale = add(matmul(abs(f64(a2)), abs(f64(b2))), abs(f64(bias)));
  expect_close(epilogue.pre_gelu, pre, pre_scale, "pre_gelu");
  expect_close(y, gelu(pre), pre_scale, "gelu");
}

// The vectorised bf16 <-> f32 conversions round exactly as float_to_bf16:
// to nearest even at every halfway point, NaNs stay (quiet) NaNs, infinities
// and signed zeros survive.
TEST(Amp, CpuBf16BlockConversionsMatchTheScalarRounding) {
  std::vector<float> values;
  for (uint32_t bits : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffffffffu,
                        0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f7fffffu, 0x00008000u, 0x7f7fffffu, 0x00000001u})
    values.push_back(std::bit_cast<float>(bits));
  for (int i = 0; i < 1000; ++i) values.push_back(std::ldexp(float(i * 7919 % 1000) - 500.0f, i % 40 - 20));
  std::vector<uint16_t> narrow(values.size());
  cpu::f32_to_bf16(values.data(), narrow.data(), int64_t(values.size()));
  std::vector<float> wide(values.size());
  cpu::bf16_to_f32(narrow.data(), wide.data(), int64_t(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(narrow[i], float_to_bf16(values[i])) << "element " << i << " = " << values[i];
    EXPECT_EQ(std::bit_cast<uint32_t>(wide[i]), std::bit_cast<uint32_t>(bf16_to_float(narrow[i]))) << i;
  }
  EXPECT_TRUE(std::isnan(wide[4]) && std::isnan(wide[5]) && std::isnan(wide[6]));
  // The backend's contiguous casts (autocast's to_dtype) use the same loops.
  const int64_t n = int64_t(values.size());
  Tensor cast = to_dtype(Tensor::from_vector(values, {n}), DType::bf16);
  EXPECT_EQ(std::vector<uint16_t>(cpu::bits16(cast), cpu::bits16(cast) + n), narrow);
  const std::vector<float> back = to_dtype(cast, DType::f32).to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(wide[i])) << i;
}

// bf16 elementwise ops and max-pooling work a block or a plane at a time
// rather than staging whole tensors; results must not change: the f32 op on
// the rounded values, rounded once. Sizes cover the vector loops, several
// blocks, ragged tails and the parallel path.
// f16 conversions (branch-free arithmetic, dtype.h) are F16C's instructions:
// every half widens to the same float, and floats narrow to the same half
// (halfway points, subnormals, overflow, and a million floats spread over all
// 2^32 bit patterns; every one of them was checked once, in 17 s), NaNs to
// NaNs of the same sign. (The tests are built for any x86-64, so the
// instructions are asked for by function.)
__attribute__((target("f16c"))) float f16c_widened(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t f16c_narrowed(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
TEST(Amp, F16ConversionsAreF16CsInstructions) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this CPU has no F16C instructions to compare with";
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float wide = f16_to_float(uint16_t(h)), hardware = f16c_widened(uint16_t(h));
    if (std::isnan(hardware)) ASSERT_TRUE(std::isnan(wide)) << h;
    else ASSERT_EQ(std::bit_cast<uint32_t>(wide), std::bit_cast<uint32_t>(hardware)) << h;
  }
  std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x477ff000u, 0x477fefffu,
                                    0x47800000u, 0x38800000u, 0x33800000u, 0x33000000u, 0x33000001u, 0x3f801000u,
                                    0x3f803000u, 0x00000001u, 0x7fc00000u, 0xffc00001u, 0x7f800001u};
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 4093) patterns.push_back(uint32_t(bits));
  for (uint32_t bits : patterns) {
    const float v = std::bit_cast<float>(bits);
    const uint16_t half = float_to_f16(v), hardware = f16c_narrowed(v);
    if (std::isnan(v)) {
      ASSERT_TRUE(std::isnan(f16_to_float(half))) << bits;
      ASSERT_EQ(half >> 15, hardware >> 15) << bits;
    } else {
      ASSERT_EQ(half, hardware) << bits;
    }
  }
}

TEST(Amp, CpuBf16BlockedOpsEqualTheF32OpRoundedOnce) {
  for (DType low : {DType::bf16, DType::f16})  // elementwise ops run in registers on both
    for (int64_t n : {int64_t(37), int64_t(4099), int64_t(3 * 70001)}) {
      Tensor a = to_dtype(random_tensor({n}, 51, DType::f32, -3, 3), low);
      Tensor b = to_dtype(random_tensor({n}, 52, DType::f32, -3, 3), low);
      Tensor ar = to_dtype(a, DType::f32), br = to_dtype(b, DType::f32);
      auto same = [&](const Tensor& got, const Tensor& ref32, const char* what) {
        EXPECT_EQ(got.dtype(), low) << what;
        EXPECT_EQ(got.to_vector<float>(), to_dtype(ref32, low).to_vector<float>())
            << what << " " << dtype_name(low) << " n=" << n;
      };
      same(relu(a), relu(ar), "relu");
      {  // ReLU's gradient (worked on the bits directly)
        Tensor x = a.detach().set_requires_grad(), xr = ar.detach().set_requires_grad();
        sum(mul(relu(x), b)).backward();
        sum(mul(relu(xr), br)).backward();
        same(x.grad(), xr.grad(), "relu backward");
      }
      same(gelu(a), gelu(ar), "gelu");
      {  // GELU's gradient, a binary op of the gradient and the input
        Tensor x = a.detach().set_requires_grad(), xr = ar.detach().set_requires_grad();
        sum(mul(gelu(x), b)).backward();
        sum(mul(gelu(xr), br)).backward();
        same(x.grad(), xr.grad(), "gelu backward");
      }
      same(add(a, b), add(ar, br), "add");
      same(mul(a, b), mul(ar, br), "mul");
      same(exp(a), exp(ar), "exp");
    }
  // Sums over leading dims (bias gradients) read bf16 directly.
  for (const Shape& shape : {Shape{300, 700}, Shape{4, 75, 33}, Shape{1, 5, 7}}) {
    Tensor x = to_dtype(random_tensor(shape, 55, DType::f32, -3, 3), DType::bf16), xr = to_dtype(x, DType::f32);
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0}, std::vector<int64_t>{0, 1}}) {
      EXPECT_EQ(sum(x, dims).to_vector<float>(), to_dtype(sum(xr, dims), DType::bf16).to_vector<float>()) << "sum";
      EXPECT_EQ(mean(x, dims).to_vector<float>(), to_dtype(mean(xr, dims), DType::bf16).to_vector<float>()) << "mean";
    }
  }
  for (const Shape& shape : {Shape{2, 3, 9, 10}, Shape{8, 16, 28, 28}}) {
    Tensor x = to_dtype(random_tensor(shape, 53, DType::f32), DType::bf16).set_requires_grad();
    Tensor xr = to_dtype(x.detach(), DType::f32).set_requires_grad();
    for (auto [kernel, stride] : {std::pair<int64_t, int64_t>{2, 2}, {3, 1}}) {
      Tensor y = max_pool2d(x, kernel, stride), yr = max_pool2d(xr, kernel, stride);
      EXPECT_EQ(y.to_vector<float>(), to_dtype(yr, DType::bf16).to_vector<float>()) << "max_pool2d " << kernel;
      Tensor g = to_dtype(random_tensor(y.shape(), 54, DType::f32), DType::bf16);
      sum(mul(y, g)).backward();
      sum(mul(yr, to_dtype(g, DType::f32))).backward();
      EXPECT_EQ(x.grad().to_vector<float>(), to_dtype(xr.grad(), DType::bf16).to_vector<float>())
          << "max_pool2d backward " << kernel;
      x.zero_grad();
      xr.zero_grad();
    }
  }
}

// ReLU and its gradient on bf16 and f16 bits keep the f32 ops' answers at
// the edges: -0 and NaNs (of either sign) pass ReLU, and the gradient passes
// where the input is positive or NaN.
TEST(Amp, CpuBf16ReluEdgeValuesMatchF32) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values = {0.0f, -0.0f, 1.5f, -1.5f, inf, -inf, nan, -nan, 1e-40f, -1e-40f,
                                     65504.0f, -65504.0f, 6e-8f, -6e-8f};
  Tensor x32 = Tensor::from_vector<float>(values, {int64_t(values.size())});
  Tensor g32 = full({int64_t(values.size())}, 2.0);
  auto bits = [](const Tensor& t) {
    const auto* p = static_cast<const uint16_t*>(t.data_ptr());
    return std::vector<uint16_t>(p, p + t.numel());
  };
  for (DType low : {DType::bf16, DType::f16}) {
    Tensor x16 = to_dtype(x32, low), g16 = to_dtype(g32, low);
    Tensor y16 = Tensor::empty_like(x16), y32 = Tensor::empty_like(x32);
    backend_for(x16).unary(UnaryOp::relu, x16, y16);
    backend_for(x32).unary(UnaryOp::relu, to_dtype(x16, DType::f32), y32);
    EXPECT_EQ(bits(y16), bits(to_dtype(y32, low))) << "relu " << dtype_name(low);
    backend_for(x16).binary(BinaryOp::relu_backward, g16, x16, y16);
    backend_for(x32).binary(BinaryOp::relu_backward, g32, to_dtype(x16, DType::f32), y32);
    EXPECT_EQ(bits(y16), bits(to_dtype(y32, low))) << "relu_backward " << dtype_name(low);
  }
}

// bf16 convolutions run oneDNN's bf16 kernels where they are the faster
// (cpu::bf16_gemm_available()), else in f32 on staged copies. Either way the
// output, and the input, weight and bias gradients, are within bf16 rounding
// of f64 on the same values.
TEST(Amp, CpuBf16ConvolutionMatchesF64OnTheRoundedOperands) {
  auto leaf64 = [](const Tensor& t) { return to_dtype(t.detach(), DType::f64).set_requires_grad(); };
  auto close = [](const Tensor& got, const Tensor& ref, double scale, const std::string& what) {
    std::vector<float> a = got.to_vector<float>();
    std::vector<double> r = ref.to_vector<double>();
    ASSERT_EQ(a.size(), r.size()) << what;
    for (size_t i = 0; i < r.size(); ++i) EXPECT_NEAR(a[i], r[i], std::abs(r[i]) / 128 + scale) << what << " " << i;
  };
  // Padded and strided, a non-square kernel, one input channel (the CNN's
  // first layer).
  struct Case {
    Shape x, w;
    int64_t stride, pad;
  };
  for (const Case& c : {Case{{4, 3, 9, 8}, {5, 3, 3, 3}, 1, 1}, Case{{2, 4, 11, 10}, {6, 4, 3, 2}, 2, 0},
                        Case{{3, 1, 12, 12}, {8, 1, 3, 3}, 1, 1}}) {
    const std::string what = shape_str(c.x) + " * " + shape_str(c.w) + " stride " + std::to_string(c.stride);
    Tensor x = to_dtype(random_tensor(c.x, 61, DType::f32), DType::bf16).set_requires_grad();
    Tensor w = to_dtype(random_tensor(c.w, 62, DType::f32), DType::bf16).set_requires_grad();
    Tensor bias = to_dtype(random_tensor({c.w[0]}, 63, DType::f32), DType::bf16).set_requires_grad();
    Tensor x64 = leaf64(x), w64 = leaf64(w), b64 = leaf64(bias);
    Tensor y = conv2d(x, w, bias, c.stride, c.pad), y64 = conv2d(x64, w64, b64, c.stride, c.pad);
    EXPECT_EQ(y.dtype(), DType::bf16);
    Tensor g = to_dtype(random_tensor(y.shape(), 64, DType::f32), DType::bf16);
    sum(mul(y, g)).backward();
    sum(mul(y64, to_dtype(g, DType::f64))).backward();
    close(y, y64, 0.05, "output " + what);  // at most 36 products of magnitude <= 1
    close(x.grad(), x64.grad(), 0.05, "dx " + what);
    close(w.grad(), w64.grad(), 0.3, "dweight " + what);  // sums over a few hundred positions
    close(bias.grad(), b64.grad(), 0.3, "dbias " + what);
  }
}

TEST(Amp, CpuLowPrecisionBackwardAndAccumulation) {
  // A bf16 leaf accumulates two gradients (in-place add on bf16 storage), and
  // embedding_backward adds into its bf16 output rather than overwriting it.
  Tensor w = to_dtype(random_tensor({4, 3}, 41, DType::f32), DType::bf16).set_requires_grad();
  Tensor ids = Tensor::from_vector<int64_t>({1, 1, 3}, {3});
  Tensor loss = add(sum(embedding(w, ids)), sum(mul_scalar(w, 2.0)));
  loss.backward();
  std::vector<float> g = w.grad().to_vector<float>();
  const std::vector<float> expected = {2, 2, 2, 4, 4, 4, 2, 2, 2, 3, 3, 3};
  EXPECT_EQ(g, expected);
  EXPECT_EQ(w.grad().dtype(), DType::bf16);
  // Gradient check of attention in bf16 against f32 autograd (150
  // positions: causal heads in 64-row blocks, the last one ragged).
  for (const Shape& shape : {Shape{1, 1, 4, 4}, Shape{1, 2, 150, 8}}) {
    Tensor q32 = random_tensor(shape, 42, DType::f32).set_requires_grad();
    Tensor q16 = to_dtype(q32.detach(), DType::bf16).set_requires_grad();
    sum(square(scaled_dot_product_attention(q32, q32, q32, true))).backward();
    sum(square(scaled_dot_product_attention(q16, q16, q16, true))).backward();
    EXPECT_EQ(q16.grad().dtype(), DType::bf16);
    EXPECT_LT(relative_error(q16.grad(), q32.grad()), 3e-2) << shape_str(shape);
  }
}

}  // namespace
}  // namespace kiln
