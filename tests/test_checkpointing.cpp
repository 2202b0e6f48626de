// Activation checkpointing: the same gradients, bit for bit, with less
// activation memory.
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/autograd/checkpoint.h"
#include "kiln/nn/layers.h"
#include "models/gpt/gpt.h"

namespace kiln {
namespace {

using models::ActivationCheckpointing;

struct StepResult {
  double loss;
  std::vector<std::pair<std::string, Tensor>> grads;
  size_t peak_activations = 0;
  uint64_t dropout_offset = 0;
};

StepResult gpt_step(ActivationCheckpointing mode, double dropout, int64_t layers = 3) {
  models::GptConfig c;
  c.vocab_size = 97, c.block_size = 32, c.n_layer = layers, c.n_head = 2, c.n_embd = 32, c.dropout = dropout;
  Generator init(5);
  auto dropout_gen = std::make_shared<Generator>(9);
  models::Gpt model(c, init, dropout_gen);
  model.set_activation_checkpointing(mode);
  std::vector<int64_t> ids(4 * 32), targets(4 * 32);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int64_t((i * 31) % 97);
    targets[i] = int64_t((i * 17 + 3) % 97);
  }
  Tensor x = Tensor::from_vector(ids, {4, 32}), y = Tensor::from_vector(targets, {4, 32});
  Allocator& a = allocator_for(Device::cpu());
  a.reset_peak();
  const size_t base = a.stats().current_by_category[size_t(MemoryCategory::activations)];
  StepResult r;
  {
    MemoryCategoryScope activations(MemoryCategory::activations);
    Tensor loss = model.loss(x, y);
    r.loss = loss.item();
    loss.backward();
  }
  r.peak_activations = a.stats().peak_by_category[size_t(MemoryCategory::activations)] - base;
  for (auto& [name, p] : model.named_parameters()) r.grads.emplace_back(name, p.grad());
  r.dropout_offset = dropout_gen->offset();
  return r;
}

void expect_same_gradients(const StepResult& a, const StepResult& b, const char* what) {
  EXPECT_EQ(a.loss, b.loss) << what;
  EXPECT_EQ(a.dropout_offset, b.dropout_offset) << what << ": the generator must end where the plain run's did";
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_TRUE(b.grads[i].second.defined()) << what << ": no gradient for " << a.grads[i].first;
    EXPECT_EQ(0, std::memcmp(a.grads[i].second.data_ptr(), b.grads[i].second.data_ptr(), a.grads[i].second.nbytes()))
        << what << ": " << a.grads[i].first;
  }
}

TEST(ActivationCheckpointing, GptGradientsAreBitwiseEqualWithAndWithoutDropout) {
  for (double dropout : {0.0, 0.1}) {
    StepResult none = gpt_step(ActivationCheckpointing::none, dropout);
    expect_same_gradients(none, gpt_step(ActivationCheckpointing::selective, dropout), "selective");
    expect_same_gradients(none, gpt_step(ActivationCheckpointing::blocks, dropout), "blocks");
  }
}

// 12 layers: the block activations dominate, as in the benchmark.
TEST(ActivationCheckpointing, GptActivationMemoryShrinks) {
  StepResult none = gpt_step(ActivationCheckpointing::none, 0.0, 12);
  StepResult selective = gpt_step(ActivationCheckpointing::selective, 0.0, 12);
  StepResult blocks = gpt_step(ActivationCheckpointing::blocks, 0.0, 12);
  std::printf("[checkpointing] peak activations: none %zu, selective %zu (%.0f%%), blocks %zu (%.0f%%)\n",
              none.peak_activations, selective.peak_activations,
              100.0 * double(selective.peak_activations) / double(none.peak_activations), blocks.peak_activations,
              100.0 * double(blocks.peak_activations) / double(none.peak_activations));
  EXPECT_LT(double(selective.peak_activations), 0.75 * double(none.peak_activations));
  EXPECT_LT(double(blocks.peak_activations), 0.5 * double(none.peak_activations));
}

// The function may hold parameters the checkpointed input does not lead to,
// and the input may need no gradient: the parameters still get theirs.
TEST(ActivationCheckpointing, ParametersInsideGetGradientsWhenTheInputNeedsNone) {
  Generator init(1);
  nn::Linear layer(3, 2, init);
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  sum(layer.forward(x)).backward();
  Tensor plain = layer.weight.grad().clone();
  layer.zero_grad();
  sum(checkpoint([&](const Tensor& in) { return layer.forward(in); }, x)).backward();
  ASSERT_TRUE(layer.weight.grad().defined());
  EXPECT_EQ(layer.weight.grad().to_vector<float>(), plain.to_vector<float>());
}

}  // namespace
}  // namespace kiln

#include <filesystem>

#include "apps/recipes/recipe.h"
#include "checkpoint_test_util.h"
#include "kiln/io/checkpoint.h"

namespace kiln {
namespace {

// `kiln train --checkpoint-activations` end to end: the same weights after
// training, bit for bit, in every mode.
TEST(ActivationCheckpointing, RecipeTrainsToTheSameWeightsInEveryMode) {
  std::map<std::string, Checkpoint> results;
  for (const char* mode : {"none", "selective", "blocks"}) {
    recipes::TrainOptions o;
    o.recipe = "fortunes-gpt";
    o.steps = 3;
    o.stop_after = 3;
    o.batch_size = 4;
    o.checkpointing = mode;
    o.out_dir = (std::filesystem::path(KILN_BINARY_DIR) / "test-checkpointing" / mode).string();
    std::filesystem::remove_all(o.out_dir);
    o.progress = false;
    o.threads = 2;
    o.cache_dir = std::string(KILN_BINARY_DIR) + "/test-cache";
    results[mode] = load_checkpoint(recipes::train(o, [](const std::string&) {}).checkpoint);
  }
  testing::expect_bitwise_equal(results["none"].model, results["selective"].model);
  testing::expect_bitwise_equal(results["none"].model, results["blocks"].model);
  EXPECT_EQ(results["blocks"].state.at("checkpointing"), "blocks");
}

}  // namespace
}  // namespace kiln
