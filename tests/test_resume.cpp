// Training N steps straight must equal training k steps, checkpointing,
// resuming and training N-k more — bitwise, weights and optimizer state.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "checkpoint_test_util.h"
#include "apps/recipes/recipe.h"
#include "kiln/io/checkpoint.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::expect_bitwise_equal;

recipes::TrainOptions small_run(const std::string& recipe, const std::string& out) {
  recipes::TrainOptions o;
  o.recipe = recipe;
  o.steps = 6;
  o.batch_size = 16;
  o.out_dir = out;
  o.progress = false;
  o.threads = 2;
  o.cache_dir = std::string(KILN_BINARY_DIR) + "/test-cache";
  return o;
}

void check_resume_is_bitwise(const std::string& recipe) {
  fs::path root = fs::path(KILN_BINARY_DIR) / "test-resume" / recipe;
  fs::remove_all(root);
  auto quiet = [](const std::string&) {};

  recipes::TrainResult straight = recipes::train(small_run(recipe, (root / "straight").string()), quiet);
  ASSERT_EQ(straight.steps_done, 6);

  recipes::TrainOptions first = small_run(recipe, (root / "resumed").string());
  first.stop_after = 2;
  ASSERT_EQ(recipes::train(first, quiet).steps_done, 2);
  recipes::TrainOptions second = small_run(recipe, (root / "resumed").string());
  second.resume = true;
  recipes::TrainResult resumed = recipes::train(second, quiet);
  ASSERT_EQ(resumed.steps_done, 6);
  // A resume that silently trained from scratch would also end bitwise equal
  // (same seed), so check that it really started from the checkpoint.
  EXPECT_EQ(resumed.start_step, 2);
  EXPECT_EQ(fs::path(resumed.resumed_from).filename(), checkpoint_dir_name(2));
  EXPECT_EQ(straight.start_step, 0);
  EXPECT_EQ(straight.resumed_from, "");

  Checkpoint a = load_checkpoint(straight.checkpoint), b = load_checkpoint(resumed.checkpoint);
  expect_bitwise_equal(a.model, b.model);
  expect_bitwise_equal(a.optimizer, b.optimizer);
  EXPECT_EQ(a.state.at("loader"), b.state.at("loader"));
  EXPECT_EQ(a.state.at("dropout_rng"), b.state.at("dropout_rng"));
  EXPECT_EQ(straight.final_train_loss, resumed.final_train_loss);
}

TEST(Resume, MlpIsBitwiseExact) { check_resume_is_bitwise("fashion-mlp"); }
TEST(Resume, CnnWithDropoutIsBitwiseExact) { check_resume_is_bitwise("fashion-cnn"); }
TEST(Resume, FastCnnIsBitwiseExact) { check_resume_is_bitwise("fashion-fast"); }
TEST(Resume, GptIsBitwiseExact) { check_resume_is_bitwise("fortunes-gpt"); }

TEST(Resume, ResumeRejectsAnotherRecipesCheckpoint) {
  fs::path root = fs::path(KILN_BINARY_DIR) / "test-resume" / "mismatch";
  fs::remove_all(root);
  auto quiet = [](const std::string&) {};
  recipes::TrainOptions o = small_run("fashion-mlp", root.string());
  o.steps = 1;
  recipes::train(o, quiet);
  recipes::TrainOptions other = small_run("fashion-cnn", root.string());
  other.resume = true;
  EXPECT_THROW(recipes::train(other, quiet), Error);
}

}  // namespace
}  // namespace kiln
