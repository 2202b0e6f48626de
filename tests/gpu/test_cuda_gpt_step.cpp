// One GPT training step on CUDA matches the same step on the CPU: loss,
// every gradient, and every weight after AdamW. Tolerances allow TF32 GEMMs.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/optim/optimizer.h"
#include "models/gpt/gpt.h"

namespace kiln {
namespace {

struct StepResult {
  double loss;
  std::map<std::string, std::vector<float>> before, grads, weights;
};

StepResult gpt_step(Device device) {
  models::GptConfig c;
  c.vocab_size = 96, c.block_size = 32, c.n_layer = 2, c.n_head = 2, c.n_embd = 64;
  Generator init(11);
  models::Gpt model(c, init, std::make_shared<Generator>(1));
  model.to(device);
  optim::AdamW opt(model.named_parameters(), 1e-3);
  Generator g(5);
  std::vector<int64_t> ids(2 * 32), targets(2 * 32);
  for (auto& v : ids) v = int64_t(g.below(96));
  for (auto& v : targets) v = int64_t(g.below(96));
  Tensor loss = model.loss(Tensor::from_vector(ids, {2, 32}).to(device), Tensor::from_vector(targets, {2, 32}).to(device));
  loss.backward();
  StepResult r{loss.item(), {}, {}, {}};
  for (auto& [name, p] : model.named_parameters()) {
    r.before[name] = p.to_vector<float>();
    r.grads[name] = p.grad().to_vector<float>();
  }
  opt.step();
  for (auto& [name, p] : model.named_parameters()) r.weights[name] = p.to_vector<float>();
  return r;
}

// max |a - b| <= atol + rtol * max |b|, and no NaN anywhere: std::max(x, NaN)
// keeps x, so a NaN must be looked for, not maxed over.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_FALSE(std::isnan(a[i]) || std::isnan(b[i])) << what << ": NaN at " << i;
    max_diff = std::max(max_diff, std::abs(double(a[i]) - double(b[i])));
    max_ref = std::max(max_ref, std::abs(double(b[i])));
  }
  EXPECT_LE(max_diff, atol + rtol * max_ref) << what << " (max |ref| " << max_ref << ")";
}

// AdamW's first step from the device's own gradient g: m/(sqrt(v)+eps) is
// g / (|g| + eps) after bias correction, plus decoupled weight decay.
std::vector<float> first_adamw_update(const std::vector<float>& w, const std::vector<float>& g, double lr) {
  const double eps = 1e-8, weight_decay = 0.01;  // optim::AdamWOptions defaults
  std::vector<float> du(w.size());
  for (size_t i = 0; i < w.size(); ++i)
    du[i] = float(-lr * (double(g[i]) / (std::abs(double(g[i])) + eps)) - lr * weight_decay * double(w[i]));
  return du;
}

std::vector<float> difference(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<float> d(after.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = after[i] - before[i];
  return d;
}

TEST(CudaGpt, OneTrainingStepMatchesTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  StepResult cpu = gpt_step(Device::cpu()), gpu = gpt_step(Device::cuda(0));
  ASSERT_FALSE(std::isnan(gpu.loss));
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-3 * std::abs(cpu.loss));
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (auto& [name, g] : cpu.grads) expect_close(gpu.grads.at(name), g, 1e-5, 2e-2, "grad " + name);
  for (auto& [name, w] : cpu.before) expect_close(gpu.before.at(name), w, 0, 0, "initial weight " + name);
  // The update itself (after - before), against AdamW applied to the GPU's
  // own gradients: an optimizer that did nothing, or the wrong thing, fails
  // here, and a gradient that is ~0 on both devices cannot flip the check.
  for (auto& [name, w] : gpu.before) {
    std::vector<float> want = first_adamw_update(w, gpu.grads.at(name), 1e-3);
    expect_close(difference(gpu.weights.at(name), w), want, 0, 1e-3, "AdamW update of " + name);
  }
}

// Serving's decode step (continuous batching) on CUDA: prompts through
// forward_cached, then two batched decode steps over three sequences at
// different positions, each compared with the CPU's logits.
TEST(CudaGpt, BatchedDecodeMatchesTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  models::GptConfig c;
  c.vocab_size = 96, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 64;
  auto logits_on = [&](Device device) {
    Generator init(12);
    models::Gpt model(c, init, std::make_shared<Generator>(1));
    model.to(device);
    model.eval();
    NoGradGuard ng;
    const std::vector<std::vector<int64_t>> prompts = {{3, 1, 4}, {1, 5, 9, 2, 6, 5, 3, 5}, {7}};
    std::vector<models::KvCache> caches;
    std::vector<float> out;
    for (const auto& p : prompts) {
      caches.push_back(model.new_cache());
      std::vector<float> first =
          model.forward_cached(Tensor::from_vector(p, {1, int64_t(p.size())}).to(device), caches.back())
              .to_vector<float>();
      out.insert(out.end(), first.begin(), first.end());
    }
    std::vector<models::KvCache*> batch = {&caches[0], &caches[1], &caches[2]};
    for (const std::vector<int32_t>& next : {std::vector<int32_t>{8, 2, 11}, std::vector<int32_t>{40, 41, 42}}) {
      std::vector<float> step = model.forward_decode(next, batch).to_vector<float>();
      out.insert(out.end(), step.begin(), step.end());
    }
    return out;
  };
  const std::vector<float> cpu = logits_on(Device::cpu()), gpu = logits_on(Device::cuda(0));
  expect_close(gpu, cpu, 1e-4, 2e-2, "prompt and decode logits");
}

}  // namespace
}  // namespace kiln
