// nn modules, optimizers, schedules, clipping and GPT sampling.
#include "op_test_util.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/layers.h"
#include "kiln/optim/optimizer.h"
#include "models/gpt/gpt.h"
#include "models/vision/classifiers.h"

namespace kiln {
namespace {

TEST(Nn, ParameterNamesFollowPyTorch) {
  Generator g(0);
  auto mlp = models::make_mlp(g);
  std::vector<std::string> names;
  for (auto& [n, p] : mlp->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"}));
  EXPECT_EQ(mlp->parameter_count(), 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);

  models::GptConfig c;
  c.vocab_size = 50, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  models::Gpt gpt(c, g, std::make_shared<Generator>(1));
  std::map<std::string, Shape> shapes;
  for (auto& [n, p] : gpt.named_parameters()) shapes[n] = p.shape();
  EXPECT_EQ(shapes.at("transformer.wte.weight"), (Shape{50, 16}));
  EXPECT_EQ(shapes.at("transformer.h.1.attn.c_attn.weight"), (Shape{48, 16}));
  EXPECT_EQ(shapes.at("transformer.h.0.mlp.c_fc.bias"), (Shape{64}));
  EXPECT_EQ(shapes.count("transformer.ln_f.weight"), 1u);
  EXPECT_EQ(shapes.size(), 4u + 2 * 12);  // wte, wpe, ln_f.{w,b} + 12 per block
}

TEST(Nn, TrainEvalModeControlsDropout) {
  auto gen = std::make_shared<Generator>(3);
  nn::Dropout drop(0.5, gen);
  Tensor x = ones({1000});
  EXPECT_LT(sum(drop(x)).item(), 900.0 * 2);  // some zeroed (scaled survivors)
  EXPECT_NE(drop(x).to_vector<float>(), x.to_vector<float>());
  drop.eval();
  EXPECT_EQ(drop(x).to_vector<float>(), x.to_vector<float>());
}

TEST(Nn, LoadParametersReportsMismatches) {
  Generator g(0);
  nn::Linear a(3, 2, g), b(3, 2, g);
  b.load_parameters(a.named_parameters());
  EXPECT_EQ(b.weight.to_vector<float>(), a.weight.to_vector<float>());
  nn::Linear wrong(4, 2, g);
  try {
    b.load_parameters(wrong.named_parameters());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shape of weight"), std::string::npos) << e.what();
  }
}

TEST(Nn, AttentionIsCausal) {
  // Changing a later token must not change earlier outputs.
  Generator g(5);
  nn::CausalSelfAttention attn(8, 2, 0.0, g, std::make_shared<Generator>(0));
  Tensor x = testing::random_tensor({1, 4, 8}, 1, DType::f32);
  Tensor y1 = attn(x);
  Tensor x2 = x.clone();
  x2.data<float>()[3 * 8] += 1.0f;  // token 3
  Tensor y2 = attn(x2);
  std::vector<float> a = y1.to_vector<float>(), b = y2.to_vector<float>();
  for (int i = 0; i < 3 * 8; ++i) EXPECT_FLOAT_EQ(a[i], b[i]);
  EXPECT_NE(a[3 * 8], b[3 * 8]);
}

TEST(Optim, WarmupCosineSchedule) {
  EXPECT_DOUBLE_EQ(optim::warmup_cosine_lr(0, 10, 110, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine_lr(9, 10, 110, 1.0, 0.1), 1.0);
  EXPECT_NEAR(optim::warmup_cosine_lr(60, 10, 110, 1.0, 0.1), 0.55, 1e-12);  // halfway down
  EXPECT_DOUBLE_EQ(optim::warmup_cosine_lr(110, 10, 110, 1.0, 0.1), 0.1);
}

TEST(Optim, ClipGradNormScalesToMaxNorm) {
  Tensor a = Tensor::from_vector<float>({3, 0}, {2}).set_requires_grad();
  Tensor b = Tensor::from_vector<float>({0, 4}, {2}).set_requires_grad();
  sum(add(mul(a, a), mul(b, b))).backward();  // grads (6,0) and (0,8): norm 10
  double norm = optim::clip_grad_norm({a, b}, 5.0);
  EXPECT_NEAR(norm, 10.0, 1e-6);
  EXPECT_NEAR(a.grad().to_vector<float>()[0], 3.0, 1e-4);
  EXPECT_NEAR(b.grad().to_vector<float>()[1], 4.0, 1e-4);
}

TEST(Optim, AdamWAndSgdReduceALoss) {
  for (int which = 0; which < 3; ++which) {
    Generator g(1);
    nn::Linear model(4, 1, g);
    Tensor x = testing::random_tensor({32, 4}, 2, DType::f32);
    Tensor target = sum(mul(x, Tensor::from_vector<float>({1, -2, 3, 0.5f}, {4})), {1}, true);
    std::unique_ptr<optim::Optimizer> opt;
    if (which == 0) opt = std::make_unique<optim::AdamW>(model.named_parameters(), 0.05);
    if (which == 1) opt = std::make_unique<optim::SGD>(model.named_parameters(), 0.1, optim::SgdOptions{0.9, 0.0, false});
    if (which == 2) opt = std::make_unique<optim::SGD>(model.named_parameters(), 0.1, optim::SgdOptions{0.9, 1e-4, true});
    double first = 0, last = 0;
    for (int step = 0; step < 200; ++step) {
      Tensor loss = mean(square(sub(model(x), target)));
      if (step == 0) first = loss.item();
      last = loss.item();
      opt->zero_grad();
      loss.backward();
      opt->step();
    }
    EXPECT_LT(last, first * 0.01) << "optimizer " << which;
  }
}

TEST(Models, GptSamplingWithTopOneIsGreedy) {
  models::GptConfig c;
  c.vocab_size = 20, c.block_size = 6, c.n_layer = 1, c.n_head = 2, c.n_embd = 8;
  Generator g(4);
  models::Gpt gpt(c, g, std::make_shared<Generator>(1));
  Generator s1(9), s2(10);
  // top_k = 1 is greedy whatever the seed; the context window slides past block_size.
  std::vector<int32_t> a = gpt.generate({1, 2}, 8, 1.0, 1, s1), b = gpt.generate({1, 2}, 8, 1.0, 1, s2);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 10u);
  NoGradGuard ng;
  Tensor logits = gpt(Tensor::from_vector<int64_t>({1, 2}, {1, 2}));
  EXPECT_EQ(argmax(slice(logits, 1, 1, 2), -1).item(), double(a[2]));
  EXPECT_EQ(gpt.generate({1, 2}, 8, 0.0, 0, s2), a) << "temperature 0 is greedy too";
  EXPECT_THROW(gpt.generate({1}, 1, -0.5, 0, s1), Error);
  EXPECT_THROW(gpt(Tensor::from_vector<int64_t>(std::vector<int64_t>(7, 0), {1, 7})), Error);
}

// A 2-layer GPT with a 30-token vocabulary and an 8-token context, for inference.
models::Gpt small_gpt(uint64_t seed) {
  models::GptConfig c;
  c.vocab_size = 30, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  Generator g(seed);
  models::Gpt gpt(c, g, std::make_shared<Generator>(1));
  gpt.eval();
  return gpt;
}

// The KV cache: a prompt and then one token at a time give the logits the
// whole sequence gives at each position, and greedy generation across the
// end of the context window (where the cache starts over from the last
// block_size tokens) picks what the full forward of that window picks.
TEST(Models, GptKvCacheMatchesTheFullForward) {
  models::Gpt gpt = small_gpt(5);
  NoGradGuard ng;
  const std::vector<int64_t> seq = {3, 1, 4, 1, 5, 9, 2, 6};
  Tensor full = gpt(Tensor::from_vector(seq, {1, 8}));
  models::KvCache cache = gpt.new_cache();
  for (size_t t = 2; t <= seq.size(); ++t) {
    std::vector<int64_t> feed = t == 2 ? std::vector<int64_t>{seq[0], seq[1]} : std::vector<int64_t>{seq[t - 1]};
    Tensor cached = gpt.forward_cached(Tensor::from_vector(feed, {1, int64_t(feed.size())}), cache);
    EXPECT_LT(testing::max_abs_diff(cached, reshape(slice(full, 1, int64_t(t) - 1, int64_t(t)), {1, 30})), 1e-5)
        << "position " << t - 1;
  }
  EXPECT_EQ(cache.length(), 8);
  Generator s(3);
  std::vector<int32_t> out = gpt.generate({3, 1, 4}, 9, 1.0, 1, s);  // runs past block_size 8
  ASSERT_EQ(out.size(), 12u);
  for (size_t t = 3; t < out.size(); ++t) {
    const size_t start = t > 8 ? t - 8 : 0;
    std::vector<int64_t> window(out.begin() + long(start), out.begin() + long(t));
    Tensor logits = gpt(Tensor::from_vector(window, {1, int64_t(window.size())}));
    EXPECT_EQ(argmax(slice(logits, 1, int64_t(window.size()) - 1, int64_t(window.size())), -1).item(), double(out[t]))
        << "token " << t;
  }
}

// Prompts joining together run as one padded batch: each gets the logits
// and the cache its prompt gets alone (up to the products' summation order,
// which depends on their row count), and decodes on from it as it would.
TEST(Models, GptBatchedPromptsMatchEachPromptAlone) {
  models::Gpt gpt = small_gpt(7);
  NoGradGuard ng;
  const std::vector<std::vector<int64_t>> prompts = {{3, 1, 4}, {1, 5, 9, 2, 6, 5, 3}, {7}};
  std::vector<models::KvCache> alone, together;
  std::vector<models::KvCache*> caches;
  for (size_t b = 0; b < prompts.size(); ++b) together.push_back(gpt.new_cache());
  for (auto& c : together) caches.push_back(&c);
  const Tensor batched = gpt.forward_prompts(prompts, caches);
  ASSERT_EQ(batched.shape(), (Shape{3, 30}));
  for (size_t b = 0; b < prompts.size(); ++b) {
    const auto& p = prompts[b];
    alone.push_back(gpt.new_cache());
    const Tensor one = gpt.forward_cached(Tensor::from_vector(p, {1, int64_t(p.size())}), alone.back());
    EXPECT_LT(testing::max_abs_diff(slice(batched, 0, int64_t(b), int64_t(b) + 1), one), 1e-5) << "prompt " << b;
    EXPECT_EQ(together[b].length(), int64_t(p.size()));
  }
  const Tensor next = gpt.forward_decode({8, 2, 11}, caches);
  for (size_t b = 0; b < prompts.size(); ++b)
    EXPECT_LT(testing::max_abs_diff(slice(next, 0, int64_t(b), int64_t(b) + 1),
                                    gpt.forward_decode({std::vector<int32_t>{8, 2, 11}[b]}, {&alone[b]})),
              1e-5)
        << "prompt " << b;
  models::KvCache used = gpt.new_cache();
  gpt.forward_prompts({{1, 2, 3, 4, 5}}, {&used});
  EXPECT_THROW(gpt.forward_prompts({{1, 2, 3, 4}}, {&used}), Error);  // 9 positions: past block_size 8
  EXPECT_THROW(gpt.forward_prompts({{}}, {&together[0]}), Error);
}

// Continuous batching: one decode step for three sequences at different
// positions, each with its own cache, gives each the logits its own
// one-at-a-time cached step gives, and leaves the caches as those would.
TEST(Models, GptBatchedDecodeMatchesOneSequenceAtATime) {
  models::Gpt gpt = small_gpt(6);
  NoGradGuard ng;
  const std::vector<std::vector<int64_t>> prompts = {{3, 1, 4}, {1, 5, 9, 2, 6, 5}, {7}};
  std::vector<models::KvCache> alone, together;
  for (const auto& p : prompts) {
    alone.push_back(gpt.new_cache());
    together.push_back(gpt.new_cache());
    gpt.forward_cached(Tensor::from_vector(p, {1, int64_t(p.size())}), alone.back());
    gpt.forward_cached(Tensor::from_vector(p, {1, int64_t(p.size())}), together.back());
  }
  const std::vector<int32_t> next = {8, 2, 11};
  std::vector<models::KvCache*> caches = {&together[0], &together[1], &together[2]};
  for (int step = 0; step < 2; ++step) {  // the second step reaches the last cache slot for the long prompt
    Tensor batched = gpt.forward_decode(next, caches);
    ASSERT_EQ(batched.shape(), (Shape{3, 30}));
    for (size_t b = 0; b < prompts.size(); ++b) {
      Tensor one = gpt.forward_cached(Tensor::from_vector<int64_t>({next[b]}, {1, 1}), alone[b]);
      EXPECT_LT(testing::max_abs_diff(slice(batched, 0, int64_t(b), int64_t(b) + 1), one), 1e-5)
          << "sequence " << b << ", step " << step;
      EXPECT_EQ(together[b].length(), alone[b].length());
    }
  }
  EXPECT_EQ(together[1].length(), 8);
  EXPECT_THROW(gpt.forward_decode({1}, {&together[1]}), Error);  // full: the caller starts it over
  EXPECT_THROW(gpt.forward_decode({1, 2}, {&together[0]}), Error);
}

}  // namespace
}  // namespace kiln
