// Hugging Face models on CUDA against the CPU: the log-probabilities of each
// causal fixture (tests/hf/fixtures, made by transformers), and one LoRA
// training step (loss, adapter gradients, and the AdamW update).
#include <gtest/gtest.h>

#include <cmath>

#include "../hf_test_util.h"
#include "kiln/backend/factory.h"
#include "kiln/backend/matmul_precision.h"
#include "kiln/nn/init.h"
#include "kiln/nn/lora.h"
#include "kiln/optim/optimizer.h"
#include "models/hf/hf_model.h"

namespace kiln {
namespace {

double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  }
  return worst;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float v : a) m = std::max(m, std::abs(double(v)));
  return m;
}

// With full-f32 products the GPU holds to the CPU as the CPU holds to
// transformers (1e-3 nat on every log-probability of the vocabulary). In TF32,
// Kiln's default, a logit of magnitude L moves by about L x 1e-3: up to
// ~0.05 nat on these fixtures' largest logits, as the first GPU run measured.
class RestoreMatmulPrecision {
 public:
  ~RestoreMatmulPrecision() { set_float32_matmul_precision(Float32MatmulPrecision::high); }
};

TEST(CudaHf, CausalLmLogProbabilitiesMatchTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  RestoreMatmulPrecision restore;
  const std::pair<Float32MatmulPrecision, double> settings[] = {{Float32MatmulPrecision::highest, 1e-3},
                                                                {Float32MatmulPrecision::high, 1e-1}};
  for (const auto& [precision, tolerance] : settings) {
    set_float32_matmul_precision(precision);
    for (const char* name : {"gpt2", "llama-gqa", "llama-mqa-tied", "mistral", "qwen2"}) {
      const auto ids = hf_test::expected(name)["ids"].get<std::vector<int32_t>>();
      auto cpu = models::load_hf_causal_lm(hf_test::fixture(name), DType::f32);
      auto gpu = models::load_hf_causal_lm(hf_test::fixture(name), DType::f32);
      gpu.model->to(Device::cuda(0));
      const std::vector<float> want = models::next_token_log_probabilities(*cpu.model, ids);
      const std::vector<float> got = models::next_token_log_probabilities(*gpu.model, ids);
      EXPECT_LT(max_abs_difference(got, want), tolerance) << name << (tolerance < 1e-2 ? " in f32" : " in TF32");
    }
  }
}

struct LoraStep {
  double loss;
  std::map<std::string, std::vector<float>> grads, before, after;
};

LoraStep lora_step(Device device) {
  auto lm = models::load_hf_causal_lm(hf_test::fixture("mistral"), DType::f32);
  nn::LoraConfig lora;
  lora.rank = 4;
  lora.targets = {"q_proj", "v_proj", "down_proj"};
  Generator init(3);
  nn::apply_lora(*lm.model, lora, init, nullptr);
  {
    NoGradGuard ng;  // B away from its zero start, so that A gets a gradient too
    for (auto& [name, p] : nn::lora_parameters(*lm.model))
      if (name.ends_with("lora_B.weight")) copy_into(nn::normal_tensor(p.shape(), 0.05, init), p);
  }
  lm.model->to(device);
  optim::AdamW opt(nn::lora_parameters(*lm.model), 1e-3);
  std::vector<int64_t> ids(2 * 20), targets(2 * 20);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(3 + (i * 37) % 90), targets[i] = int64_t(3 + (i * 53) % 90);
  Tensor loss =
      lm.model->loss(Tensor::from_vector(ids, {2, 20}).to(device), Tensor::from_vector(targets, {2, 20}).to(device));
  loss.backward();
  LoraStep r{loss.item(), {}, {}, {}};
  for (auto& [name, p] : nn::lora_parameters(*lm.model)) {
    r.grads[name] = p.grad().to_vector<float>();
    r.before[name] = p.to_vector<float>();
  }
  for (auto& [name, p] : lm.model->named_parameters())
    if (!nn::is_lora_parameter(name)) {
      EXPECT_FALSE(p.grad().defined()) << name << " is frozen";
    }
  opt.step();
  for (auto& [name, p] : nn::lora_parameters(*lm.model)) r.after[name] = p.to_vector<float>();
  return r;
}

TEST(CudaHf, LoraTrainingStepMatchesTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  LoraStep cpu = lora_step(Device::cpu()), gpu = lora_step(Device::cuda(0));
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-3 * std::abs(cpu.loss));
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  ASSERT_EQ(cpu.grads.size(), 12u);  // 2 layers x 3 targets x (A, B)
  for (auto& [name, g] : cpu.grads) {
    EXPECT_GT(max_abs(g), 0) << name;
    EXPECT_LE(max_abs_difference(gpu.grads.at(name), g), 1e-6 + 2e-2 * max_abs(g)) << name;
    // AdamW's first step moves each weight by about lr (1e-3) where the
    // gradient is not ~0; the two devices' updates agree where that holds.
    EXPECT_LE(max_abs_difference(gpu.before.at(name), cpu.before.at(name)), 0) << name;
    EXPECT_GT(max_abs_difference(gpu.after.at(name), gpu.before.at(name)), 5e-4) << name << " did not move";
  }
}

}  // namespace
}  // namespace kiln
