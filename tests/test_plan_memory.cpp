// The planner's memory figures come from running the recipe's real step.
// Here the step runs on the CPU, so the figures are measured ones.
#include <gtest/gtest.h>

#include "apps/plan/memory_probe.h"
#include "models/hf/hf_model.h"

namespace kiln {
namespace {

using namespace kiln::plan;

PlanInput small_gpt(int64_t layers, int64_t width, int64_t batch) {
  PlanInput in;
  in.recipe = "fortunes-gpt";
  in.gpt.vocab_size = 64;
  in.gpt.block_size = 32;
  in.gpt.n_layer = layers;
  in.gpt.n_head = 2;
  in.gpt.n_embd = width;
  in.batch_size = batch;
  return in;
}

TEST(PlanMemory, CpuStepBooksEveryCategory) {
  PlanInput in = small_gpt(2, 32, 4);
  const int64_t params = gpt_parameter_count(in.gpt);
  Strategy plain{"fp32", "none", 4, false};
  StepMemory m = probe_step(in, plain, Device::cpu());
  EXPECT_EQ(m.weights, size_t(params) * 4);
  EXPECT_EQ(m.grads, size_t(params) * 4);
  EXPECT_EQ(m.optimizer, size_t(params) * 8);
  EXPECT_GT(m.activations, size_t(4 * 32 * 64 * 4)) << "at least the logits";
  EXPECT_GE(m.peak, m.weights + m.optimizer);
  // Micro-batches of 1 hold a quarter of the activations (and the same
  // model state).
  StepMemory micro = probe_step(in, {"fp32", "none", 1, false}, Device::cpu());
  EXPECT_LT(micro.activations, m.activations / 2);
  EXPECT_EQ(micro.optimizer, m.optimizer);
  EXPECT_LT(micro.peak, m.peak);
}


// The planner's prediction (the step run on the meta device) against the
// allocator's measured peak (the same step really run, on a fresh simulated
// CPU device): within 3%, for the GPT at three sizes and the CNN at two batch
// sizes, under several strategies each.
void expect_prediction_matches(const PlanInput& in, const Strategy& s, int device_index) {
  StepMemory predicted = probe_step(in, s, Device::meta());
  StepMemory measured = probe_step(in, s, Device::parse("cpu:" + std::to_string(device_index)));
  const double ratio = double(predicted.peak) / double(measured.peak);
  std::printf("[plan] %s batch %lld, %s: predicted %zu, measured %zu bytes (%.4f)\n", in.recipe.c_str(),
              (long long)in.batch_size, s.str().c_str(), predicted.peak, measured.peak, ratio);
  EXPECT_NEAR(ratio, 1.0, 0.03) << s.str();
  EXPECT_EQ(predicted.weights, measured.weights) << s.str();
  EXPECT_EQ(predicted.optimizer, measured.optimizer) << s.str();
}

TEST(PlanMemory, MetaPredictionMatchesTheMeasuredPeakForTheGpt) {
  int device = 30;
  for (auto [layers, width] : {std::pair{2, 32}, std::pair{4, 64}, std::pair{6, 96}}) {
    PlanInput in = small_gpt(layers, width, 8);
    for (const Strategy& s : {Strategy{"fp32", "none", 8, false}, Strategy{"fp32", "blocks", 8, false},
                              Strategy{"fp32", "selective", 4, false}, Strategy{"fp32", "none", 2, true}})
      expect_prediction_matches(in, s, device++);
  }
}

// `kiln plan --model hf:DIR`: the Llama family built from config.json alone.
TEST(PlanMemory, MetaPredictionMatchesTheMeasuredPeakForHuggingFaceModels) {
  int device = 400;  // cpu:400 and up: devices no other test budgets
  for (const char* fixture : {"mistral", "qwen2", "llama-mqa-tied", "gpt2", "qwen3", "olmo2", "granite", "smollm3",
                              "phi3", "gemma", "gemma2", "gemma3", "gemma3-vision", "mixtral", "qwen3-moe", "olmoe"}) {
    PlanInput in;
    in.hf_config = models::read_hf_config(std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/" + fixture);
    in.hf_config["output_router_logits"] = false;  // (the load-balancing loss does not run with block checkpointing)
    in.recipe = std::string("hf:") + fixture;
    in.gpt.block_size = 24;  // longer than mistral's sliding window of 8
    in.batch_size = 4;
    for (const Strategy& s : {Strategy{"fp32", "none", 4, false}, Strategy{"fp32", "blocks", 4, false},
                              Strategy{"bf16", "none", 2, false}, Strategy{"fp32", "none", 4, true}})
      expect_prediction_matches(in, s, device++);
  }
}

// LoRA: the frozen base has no gradients or AdamW state (and in bf16 is kept
// in bf16); the adapters' are counted.
TEST(PlanMemory, MetaPredictionMatchesTheMeasuredPeakForLora) {
  int device = 80;
  for (const char* targets : {"", "all-linear"}) {
    PlanInput in;
    in.hf_config = models::read_hf_config(std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/llama-gqa");
    in.recipe = "hf:llama";
    in.gpt.block_size = 24;
    in.batch_size = 4;
    nn::LoraConfig lora;
    lora.rank = 4;
    lora.dropout = *targets ? 0.1 : 0.0;  // its masks count
    if (*targets) lora.targets = {targets};
    in.lora = lora;
    for (const Strategy& s : {Strategy{"fp32", "none", 4, false}, Strategy{"fp32", "blocks", 2, false},
                              Strategy{"bf16", "none", 4, false}, Strategy{"fp32", "none", 4, true}})
      expect_prediction_matches(in, s, device++);
  }
  // The frozen base costs no gradient and no optimizer state.
  PlanInput in;
  in.hf_config = models::read_hf_config(std::string(KILN_SOURCE_DIR) + "/tests/hf/configs/llama-2-7b");
  in.recipe = "hf:llama";
  in.gpt.block_size = 512;
  in.batch_size = 1;
  in.lora = nn::LoraConfig{16, 32, 0, {}};
  const StepMemory m = probe_step(in, {"bf16", "none", 1, false}, Device::meta());
  const size_t adapters = size_t(32) * 2 * 16 * (4096 + 4096);  // q_proj and v_proj, peft's default
  EXPECT_EQ(m.grads, adapters * 4);
  EXPECT_EQ(m.optimizer, adapters * 8);
  EXPECT_EQ(m.weights, size_t(6738415616) * 2 + adapters * 4);  // bf16 base, f32 adapters
}

TEST(PlanMemory, MetaPredictionMatchesTheMeasuredPeakForTheCnns) {
  int device = 100;  // cpu:100 and up: devices no other test budgets
  for (const char* recipe : {"fashion-cnn", "fashion-fast"})
    for (int64_t batch : {16, 64}) {
      PlanInput in;
      in.recipe = recipe;
      in.batch_size = batch;
      for (const Strategy& s : {Strategy{"fp32", "none", batch, false}, Strategy{"fp32", "none", batch / 4, false},
                                Strategy{"fp32", "none", batch, true}})
        expect_prediction_matches(in, s, device++);
    }
}

// The meta device builds and steps GPT-2 XL without memory or time.
TEST(PlanMemory, MetaStepsAGpt2XlInAnInstant) {
  PlanInput in;
  in.recipe = "gpt2-xl";
  in.gpt = models::gpt_preset("gpt2-xl");
  in.batch_size = 1;
  const size_t host_before = allocator_for(Device::cpu()).stats().current;
  StepMemory m = probe_step(in, {"bf16", "blocks", 1, false}, Device::meta());
  EXPECT_EQ(m.weights, size_t(models::gpt_parameter_count(in.gpt)) * 4);
  EXPECT_EQ(m.optimizer, 2 * m.weights);
  EXPECT_GT(m.activations, 0u);
  EXPECT_LT(allocator_for(Device::cpu()).stats().peak - host_before, size_t(64) << 20) << "no host copy of the model";
}


// The random tests' bar: the meta device's peak (`in` planned under `s`)
// against the same step's measured on a fresh cpu:`device`, within 3% over
// and never more than 1% under. Returns the ratio.
double expect_within_bar(const PlanInput& in, const Strategy& s, int device, const std::string& what) {
  const StepMemory predicted = probe_step(in, s, Device::meta());
  const StepMemory measured = probe_step(in, s, Device::parse("cpu:" + std::to_string(device)));
  const double ratio = double(predicted.peak) / double(measured.peak);
  const std::string said = what + ", " + s.str() + ": predicted " + std::to_string(predicted.peak) + " (activations " +
                           std::to_string(predicted.activations) + ", workspace " +
                           std::to_string(predicted.workspace) + "), measured " + std::to_string(measured.peak) +
                           " (activations " + std::to_string(measured.activations) + ", workspace " +
                           std::to_string(measured.workspace) + ")";
  EXPECT_GE(ratio, 0.99) << said;
  EXPECT_LE(ratio, 1.03) << said;
  EXPECT_EQ(predicted.weights, measured.weights) << said;
  EXPECT_EQ(predicted.optimizer, measured.optimizer) << said;
  return ratio;
}

// Random GPT shapes (head sizes that are and are not multiples of 16, so
// every attention path runs), precisions and strategies: the meta device's
// peak is within 3% of the measured one, and never more than 1% under it
// (under is the dangerous side: the plan says it fits and the run does not).
// bf16 runs used to be up to 19% under: the meta device answered "no" where
// this CPU multiplies bf16 natively (so the cross-entropy's bf16 copies were
// missing), and held none of the f32 copies the CPU stages bf16 weights in.
TEST(PlanMemory, MetaPredictionHoldsOverRandomShapesPrecisionsAndStrategies) {
  Generator gen(20261125);
  const auto pick = [&](std::initializer_list<int64_t> options) {
    return *(options.begin() + gen.below(options.size()));
  };
  int device = 200;  // cpu:200 and up: devices no other test budgets
  double worst_under = 0, worst_over = 0;
  for (int trial = 0; trial < 36; ++trial) {
    PlanInput in;
    in.recipe = "fortunes-gpt";
    in.gpt.vocab_size = pick({64, 100, 257});
    in.gpt.block_size = pick({16, 32, 48});
    in.gpt.n_layer = pick({1, 2, 3});
    in.gpt.n_head = pick({1, 2, 3, 5});
    in.gpt.n_embd = in.gpt.n_head * pick({8, 16, 24, 40, 64});
    in.batch_size = pick({1, 2, 3, 4, 6});
    const char* precision = trial % 4 == 3 ? "fp16" : trial % 2 ? "bf16" : "fp32";
    const Strategy s{precision, trial % 3 == 0 ? "none" : trial % 3 == 1 ? "selective" : "blocks",
                     std::max<int64_t>(1, in.batch_size / pick({1, 2})), trial % 5 == 4};
    const double ratio = expect_within_bar(
        in, s, device++,
        "layers " + std::to_string(in.gpt.n_layer) + ", heads " + std::to_string(in.gpt.n_head) + " of " +
            std::to_string(in.gpt.n_embd / in.gpt.n_head) + ", T " + std::to_string(in.gpt.block_size) + ", vocab " +
            std::to_string(in.gpt.vocab_size) + ", batch " + std::to_string(in.batch_size));
    worst_under = std::max(worst_under, 1 - ratio);
    worst_over = std::max(worst_over, ratio - 1);
  }
  std::printf("[plan] worst under %.2f%%, worst over %.2f%%\n", 100 * worst_under, 100 * worst_over);
}

// The image recipes under random batches, precisions and strategies, as the
// GPT test above: within 3% of the measured peak and never more than 1%
// under it. bf16 and fp16 convolutions stage their operands in f32 where no
// low-precision kernel runs them (the CNN's bf16 staging), and the ISA
// passes (tests/isa_tests.cmake) run this under each instruction-set cap,
// where oneDNN's kernels and Kiln's own, native bf16 and its f32 fallback,
// take turns.
TEST(PlanMemory, MetaPredictionHoldsForTheImageRecipesOverPrecisionsAndStrategies) {
  Generator gen(20261126);
  const auto pick = [&](std::initializer_list<int64_t> options) {
    return *(options.begin() + gen.below(options.size()));
  };
  int device = 300;  // cpu:300 and up: devices no other test budgets
  for (int trial = 0; trial < 18; ++trial) {
    PlanInput in;
    in.recipe = trial % 3 == 0 ? "fashion-mlp" : trial % 3 == 1 ? "fashion-cnn" : "fashion-fast";
    in.batch_size = pick({1, 3, 8, 16, 32});
    const char* precision = trial % 6 < 2 ? "fp32" : trial % 6 < 4 ? "bf16" : "fp16";
    const Strategy s{precision, "none", std::max<int64_t>(1, in.batch_size / pick({1, 2, 4})), gen.below(4) == 0};
    const double ratio = expect_within_bar(in, s, device++, in.recipe + " batch " + std::to_string(in.batch_size));
    std::printf("[plan] %s batch %lld, %s (%.4f)\n", in.recipe.c_str(), (long long)in.batch_size, s.str().c_str(), ratio);
  }
}

}  // namespace
}  // namespace kiln
