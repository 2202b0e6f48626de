// `kiln train --precision bf16|fp16` end to end on fashion-mlp: training
// reduces the loss, the checkpoint records the precision and scaler, and an
// fp16 run that skips steps resumes bitwise (as tests/test_resume.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "checkpoint_test_util.h"
#include "run_test_util.h"
#include "apps/recipes/recipe.h"
#include "kiln/io/checkpoint.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::expect_bitwise_equal;

// Few steps, and stop_after < steps so the run skips the 10,000-image test.
recipes::TrainOptions short_run(const std::string& precision, const std::string& out) {
  recipes::TrainOptions o;
  o.recipe = "fashion-mlp";
  o.precision = precision;
  o.steps = 40;
  o.stop_after = 36;
  o.batch_size = 32;
  o.lr = 2e-3;
  o.out_dir = out;
  o.progress = false;
  o.threads = 2;
  return o;
}

fs::path fresh_dir(const std::string& name) { return testing::fresh_test_dir("test-amp", name); }

TEST(Amp, RecipeTrainsInBf16AndFp16) {
  auto quiet = [](const std::string&) {};
  recipes::TrainResult fp32 = recipes::train(short_run("fp32", fresh_dir("fp32").string()), quiet);
  for (const std::string precision : {"bf16", "fp16"}) {
    std::vector<std::string> lines;
    auto log = [&](const std::string& s) { lines.push_back(s); };
    recipes::TrainResult r = recipes::train(short_run(precision, fresh_dir(precision).string()), log);
    ASSERT_EQ(r.steps_done, 36) << precision;
    // bf16 has f32's range; fp16 may skip a step while the scale settles.
    EXPECT_LE(r.skipped_steps, precision == "bf16" ? 0 : 2) << precision;
    EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                            [](const std::string& l) { return l.find("skipped, inf/NaN gradients") != l.npos; }),
              r.skipped_steps);
    // From ln(10) = 2.30 at the start to well below it, and near the f32 run.
    EXPECT_LT(r.final_train_loss, 1.2) << precision;
    EXPECT_NEAR(r.final_train_loss, fp32.final_train_loss, 0.15) << precision;
    Checkpoint ck = load_checkpoint(r.checkpoint);
    EXPECT_EQ(ck.state.at("precision"), precision);
    EXPECT_EQ(ck.state.contains("loss_scaler"), precision == "fp16");
    for (const auto& [name, t] : ck.model) EXPECT_EQ(t.dtype(), DType::f32) << name << ": master weights stay f32";
  }
  EXPECT_THROW(recipes::train(short_run("fp8", fresh_dir("fp8").string()), quiet), Error);
}

// An initial scale of 2^22 overflows f16 on the first steps, so the run skips
// some (steps 1, 2, 3 and 5 today) and backs off. Resuming after 2 steps must restore the backed-off
// scale (and the optimizer's own step count, which skips do not advance):
// starting again from 2^40 would skip different steps.
TEST(Amp, Fp16ResumeWithSkippedStepsIsBitwise) {
  fs::path root = fresh_dir("resume");
  auto run = [&](const std::string& dir) {
    recipes::TrainOptions o;
    o.recipe = "fashion-mlp";
    o.precision = "fp16";
    o.loss_scale = 4194304.0;  // 2^22
    o.steps = 6;
    o.batch_size = 16;
    o.out_dir = (root / dir).string();
    o.progress = false;
    o.threads = 2;
    return o;
  };
  std::vector<std::string> lines;
  recipes::TrainResult straight = recipes::train(run("straight"), [&](const std::string& s) { lines.push_back(s); });
  ASSERT_EQ(straight.steps_done, 6);
  ASSERT_GE(straight.skipped_steps, 3);  // the test needs skips before and after the resume point
  ASSERT_LT(straight.skipped_steps, 6);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "step 1: skipped, inf/NaN gradients; loss scale -> 2.09715e+06"),
            lines.end());

  auto quiet = [](const std::string&) {};
  recipes::TrainOptions first = run("resumed");
  first.stop_after = 2;
  ASSERT_EQ(recipes::train(first, quiet).steps_done, 2);
  recipes::TrainOptions second = run("resumed");
  second.resume = true;
  recipes::TrainResult resumed = recipes::train(second, quiet);
  ASSERT_EQ(resumed.steps_done, 6);
  ASSERT_EQ(resumed.start_step, 2) << "the resume must start from the checkpoint";

  Checkpoint a = load_checkpoint(straight.checkpoint), b = load_checkpoint(resumed.checkpoint);
  expect_bitwise_equal(a.model, b.model);
  expect_bitwise_equal(a.optimizer, b.optimizer);
  EXPECT_EQ(a.state.at("loss_scaler"), b.state.at("loss_scaler"));
  EXPECT_EQ(a.state.at("optimizer_step"), b.state.at("optimizer_step"));
  EXPECT_EQ(a.state.at("optimizer_step").get<int64_t>(), 6 - straight.skipped_steps);
  EXPECT_EQ(straight.final_train_loss, resumed.final_train_loss);
}

}  // namespace
}  // namespace kiln
