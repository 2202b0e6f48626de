// Gradient accumulation (--micro-batch) and the run record (metrics.jsonl).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "apps/recipes/train_loop.h"
#include "checkpoint_test_util.h"
#include "models/gpt/gpt.h"
#include "models/vision/classifiers.h"

#include "run_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) { return testing::fresh_test_dir("test-run-record", name); }

std::vector<nlohmann::json> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The gradients of B examples at once, and in micro-batches of 5 (so the
// last is short): equal up to float rounding.
void expect_accumulated_gradients_match(nn::Module& model, const recipes::LoopHooks& hooks,
                                        const recipes::Batch& batch) {
  recipes::MixedPrecision fp32("fp32");
  auto grads = [&](int64_t micro) {
    model.zero_grad();
    double loss = recipes::accumulate_gradients(batch, micro, hooks, fp32);
    std::vector<std::vector<float>> g;
    for (const Tensor& p : model.parameters()) g.push_back(p.grad().to_vector<float>());
    return std::make_pair(loss, g);
  };
  auto [full_loss, full] = grads(batch.x.size(0));
  auto [micro_loss, micro] = grads(5);
  EXPECT_NEAR(micro_loss, full_loss, 1e-6 * std::abs(full_loss));
  for (size_t i = 0; i < full.size(); ++i) {
    float scale = 0, worst = 0;
    for (size_t j = 0; j < full[i].size(); ++j) {
      scale = std::max(scale, std::abs(full[i][j]));
      worst = std::max(worst, std::abs(full[i][j] - micro[i][j]));
    }
    EXPECT_GT(scale, 0.0f) << "parameter " << i << " got no gradient";
    EXPECT_LE(worst, 1e-5f * scale) << "parameter " << i;
  }
}

TEST(GradientAccumulation, MlpMicroBatchesAddUpToTheFullBatch) {
  Generator init(1), data(2);
  auto model = models::make_mlp(init, 32, 16);
  recipes::LoopHooks hooks;
  hooks.loss = [&](const Tensor& x, const Tensor& y) { return cross_entropy(model->forward(x), y); };
  std::vector<int64_t> labels;
  for (int i = 0; i < 17; ++i) labels.push_back(i * 7 % 10);
  recipes::Batch batch{nn::normal_tensor({17, 1, 28, 28}, 1.0, data), Tensor::from_vector(labels, {17})};
  expect_accumulated_gradients_match(*model, hooks, batch);
}

TEST(GradientAccumulation, GptMicroBatchesAddUpToTheFullBatch) {
  Generator init(1);
  models::GptConfig c;
  c.vocab_size = 40;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  models::Gpt model(c, init, std::make_shared<Generator>(0));
  recipes::LoopHooks hooks;
  hooks.loss = [&](const Tensor& x, const Tensor& y) { return model.loss(x, y); };
  std::vector<int64_t> x, y;
  for (int i = 0; i < 12 * 8; ++i) {
    x.push_back(i * 13 % 40);
    y.push_back(i * 17 % 40);
  }
  recipes::Batch batch{Tensor::from_vector(x, {12, 8}), Tensor::from_vector(y, {12, 8})};
  expect_accumulated_gradients_match(model, hooks, batch);
}

recipes::TrainOptions gpt_run(const fs::path& dir) {
  recipes::TrainOptions o;
  o.recipe = "fortunes-gpt";
  o.steps = 6;
  o.batch_size = 8;
  o.micro_batch = 3;
  o.out_dir = dir.string();
  o.progress = false;
  o.threads = 2;
  o.cache_dir = std::string(KILN_BINARY_DIR) + "/test-cache";
  return o;
}

// With accumulation, training k steps, stopping and resuming is still
// bitwise the uninterrupted run; and the run record reads as one run.
TEST(GradientAccumulation, ResumeStaysBitwiseAndTheRecordHasEveryStepOnce) {
  fs::path root = fresh_dir("gpt");
  auto quiet = [](const std::string&) {};
  recipes::TrainResult straight = recipes::train(gpt_run(root / "straight"), quiet);
  recipes::TrainOptions first = gpt_run(root / "resumed");
  first.stop_after = 2;
  recipes::train(first, quiet);
  // A crashed run may have logged steps after its last checkpoint: a
  // resume drops them.
  std::ofstream(root / "resumed" / "metrics.jsonl", std::ios::app) << R"({"kind":"train","step":3,"loss":9})" << "\n";
  recipes::TrainOptions second = gpt_run(root / "resumed");
  second.resume = true;
  recipes::TrainResult resumed = recipes::train(second, quiet);
  ASSERT_EQ(resumed.start_step, 2);
  Checkpoint a = load_checkpoint(straight.checkpoint), b = load_checkpoint(resumed.checkpoint);
  testing::expect_bitwise_equal(a.model, b.model);
  testing::expect_bitwise_equal(a.optimizer, b.optimizer);
  EXPECT_EQ(b.state.at("micro_batch"), 3);

  std::vector<nlohmann::json> lines = read_lines(root / "resumed" / "metrics.jsonl");
  std::vector<nlohmann::json> reference = read_lines(root / "straight" / "metrics.jsonl");
  std::vector<int64_t> steps;
  for (const auto& l : lines)
    if (l.at("kind") == "train") steps.push_back(l.at("step"));
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  ASSERT_EQ(lines.size(), reference.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].at("kind") != "train") continue;
    EXPECT_EQ(lines[i].at("loss"), reference[i].at("loss")) << "step " << lines[i].at("step");
    EXPECT_EQ(lines[i].at("lr"), reference[i].at("lr"));
    EXPECT_GT(lines[i].at("items_per_s").get<double>(), 0);
  }
  const nlohmann::json& last = lines.back();
  EXPECT_EQ(last.at("kind"), "eval");
  EXPECT_EQ(last.at("val_loss"), resumed.val_loss);
}

// Each train line carries the allocator's bytes by category, and they are
// the real ones: weights are the model's parameters, exactly.
TEST(RunRecord, ReportsMemoryByCategory) {
  fs::path dir = fresh_dir("mlp");
  recipes::TrainOptions o;
  o.recipe = "fashion-mlp";
  o.steps = 4;
  o.stop_after = 3;  // skips the test-set evaluation
  o.batch_size = 32;
  o.out_dir = dir.string();
  o.progress = false;
  o.threads = 2;
  recipes::train(o, [](const std::string&) {});
  std::vector<nlohmann::json> lines = read_lines(dir / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  const int64_t params = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10;
  for (const auto& l : lines) {
    const nlohmann::json& cpu = l.at("memory").at("cpu");
    EXPECT_GE(cpu.at("current").at("weights").get<int64_t>(), params * 4);
    EXPECT_EQ(cpu.at("peak").at("optimizer").get<int64_t>(), 2 * params * 4) << "AdamW: two f32 moments";
    EXPECT_EQ(cpu.at("peak").at("grads").get<int64_t>(), params * 4);
    EXPECT_GT(cpu.at("peak").at("activations").get<int64_t>(), 32 * 784 * 4) << "at least the flattened input";
    EXPECT_GE(cpu.at("peak_total").get<int64_t>(), cpu.at("current_total").get<int64_t>());
  }
}

}  // namespace
}  // namespace kiln
