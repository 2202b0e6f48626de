// The planner's memory figures come from running the recipe's real step.
// Here the step runs on the CPU, so the figures are measured ones.
#include <gtest/gtest.h>

#include "apps/plan/memory_probe.h"

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

}  // namespace
}  // namespace kiln
