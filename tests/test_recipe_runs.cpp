// How `kiln train` treats a run as a whole: --resume restores the saved
// settings (and refuses or announces changes), a poisoned step is caught,
// `kiln eval` agrees with training, and every command reads one recipe table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "apps/recipes/gpt_recipe.h"
#include "apps/recipes/recipe.h"
#include "apps/recipes/common.h"
#include "apps/recipes/inference.h"
#include "kiln/io/checkpoint.h"

#include "run_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) { return testing::fresh_test_dir("test-recipe-runs", name); }

struct Lines {
  std::vector<std::string> lines;
  recipes::Log log() {
    return [this](const std::string& s) { lines.push_back(s); };
  }
  bool has(const std::string& part) const {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != l.npos; });
  }
};

std::string error_of(const recipes::TrainOptions& o) {
  try {
    recipes::train(o, [](const std::string&) {});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The README's example: a run with its own settings, then `--resume` with
// none. The resume must keep seed, batch size, lr and length.
recipes::TrainOptions readme_run(const fs::path& dir) {
  recipes::TrainOptions o;
  o.recipe = "fashion-mlp";
  o.steps = 4;
  o.stop_after = 2;
  o.seed = 7;
  o.batch_size = 64;
  o.lr = 2e-3;
  o.out_dir = dir.string();
  o.progress = false;
  o.threads = 2;
  return o;
}

recipes::TrainOptions bare_resume(const fs::path& dir) {
  recipes::TrainOptions o;  // no recipe, no settings: all from the checkpoint
  o.out_dir = dir.string();
  o.resume = true;
  o.progress = false;
  o.threads = 2;
  return o;
}

TEST(RecipeRuns, ResumeRestoresTheSavedSettings) {
  fs::path dir = fresh_dir("readme"), straight_dir = fresh_dir("readme-straight");
  recipes::train(readme_run(dir), [](const std::string&) {});
  Lines out;
  recipes::TrainResult resumed = recipes::train(bare_resume(dir), out.log());
  EXPECT_EQ(resumed.start_step, 2);
  EXPECT_EQ(resumed.steps_done, 4) << "the saved length (4), not the recipe default";
  EXPECT_TRUE(out.has("4 steps of 64 images")) << "the saved batch size";

  recipes::TrainOptions straight = readme_run(straight_dir);
  straight.stop_after = 0;
  recipes::TrainResult whole = recipes::train(straight, [](const std::string&) {});
  Checkpoint a = load_checkpoint(whole.checkpoint), b = load_checkpoint(resumed.checkpoint);
  for (const auto& [name, t] : a.model)
    EXPECT_EQ(0, std::memcmp(t.data_ptr(), b.model.at(name).data_ptr(), t.nbytes())) << name;
  for (const char* key : {"seed", "batch_size", "lr", "total_steps", "precision", "recipe"})
    EXPECT_EQ(a.state.at(key), b.state.at(key)) << key;
  EXPECT_EQ(b.state.at("seed"), 7);
  EXPECT_EQ(b.state.at("lr"), 2e-3);
}

TEST(RecipeRuns, ResumeRefusesChangedSettingsNamingTheSavedValue) {
  fs::path dir = fresh_dir("refuse");
  recipes::train(readme_run(dir), [](const std::string&) {});
  struct Case {
    const char* flag;
    std::function<void(recipes::TrainOptions&)> set;
    const char* saved;
  };
  const std::vector<Case> cases = {
      {"--batch-size", [](auto& o) { o.batch_size = 128; }, "--batch-size 64"},
      {"--seed", [](auto& o) { o.seed = 1337; }, "--seed 7"},
      {"--lr", [](auto& o) { o.lr = 1e-3; }, "--lr 0.002"},
      {"--precision", [](auto& o) { o.precision = "bf16"; }, "--precision fp32"},
  };
  for (const Case& c : cases) {
    recipes::TrainOptions o = bare_resume(dir);
    c.set(o);
    std::string msg = error_of(o);
    EXPECT_NE(msg.find(c.saved), std::string::npos) << c.flag << ": " << msg;
  }
  recipes::TrainOptions other = bare_resume(dir);
  other.recipe = "fashion-cnn";
  EXPECT_NE(error_of(other).find("is from recipe 'fashion-mlp'"), std::string::npos);
  recipes::TrainOptions too_short = bare_resume(dir);
  too_short.steps = 1;
  EXPECT_NE(error_of(too_short).find("ends before the checkpoint's step 2"), std::string::npos);
  // Refused before any training: the checkpoint is still the newest.
  EXPECT_EQ(fs::path(*latest_checkpoint(dir.string())).filename(), checkpoint_dir_name(2));
  // The same values given again are not a change.
  recipes::TrainOptions same = readme_run(dir);
  same.resume = true;
  same.stop_after = 0;
  EXPECT_EQ(recipes::train(same, [](const std::string&) {}).start_step, 2);
}

TEST(RecipeRuns, ResumeAppliesSafeChangesWithANotice) {
  fs::path dir = fresh_dir("extend");
  recipes::TrainOptions first = readme_run(dir);
  first.stop_after = 0;
  recipes::train(first, [](const std::string&) {});
  recipes::TrainOptions more = bare_resume(dir);
  more.steps = 6;
  more.threads = 1;
  Lines out;
  recipes::TrainResult r = recipes::train(more, out.log());
  EXPECT_EQ(r.start_step, 4);
  EXPECT_EQ(r.steps_done, 6);
  EXPECT_TRUE(out.has("--steps 6: the run now ends at step 6 (was 4")) << "extending is announced";
  EXPECT_TRUE(out.has("resuming with 1 CPU threads; the run used 2"));
  EXPECT_EQ(load_checkpoint(r.checkpoint).state.at("total_steps"), 6);
  // A finished run resumed without --steps says so and trains nothing.
  Lines again;
  recipes::TrainResult done = recipes::train(bare_resume(dir), again.log());
  EXPECT_EQ(done.start_step, 6);
  EXPECT_EQ(done.steps_done, 6);
  EXPECT_TRUE(again.has("already finished at step 6"));
}

TEST(RecipeRuns, ResumeWithoutACheckpointSaysItStartsFromScratch) {
  fs::path dir = fresh_dir("nothing");
  recipes::TrainOptions o = readme_run(dir);
  o.resume = true;
  Lines out;
  recipes::TrainResult r = recipes::train(o, out.log());
  EXPECT_EQ(r.start_step, 0);
  EXPECT_EQ(r.resumed_from, "");
  EXPECT_TRUE(out.has("no checkpoint in"));
}

// fp32: a NaN loss stops the run with a clear message and leaves the last
// checkpoint as it was. fp16: the step is skipped and the scale backs off.
TEST(RecipeRuns, PoisonedStepStopsAnFp32Run) {
  fs::path dir = fresh_dir("poison-fp32");
  recipes::TrainOptions o = readme_run(dir);
  o.stop_after = 0;
  o.steps = 6;
  o.checkpoint_every = 2;
  o.poison_step = 3;
  std::string msg = error_of(o);
  EXPECT_NE(msg.find("training diverged at step 3 (loss nan)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Lower the learning rate"), std::string::npos) << msg;
  EXPECT_EQ(fs::path(*latest_checkpoint(dir.string())).filename(), checkpoint_dir_name(2));
  for (const auto& [name, t] : load_checkpoint(*latest_checkpoint(dir.string())).model)
    for (float v : t.to_vector<float>()) ASSERT_TRUE(std::isfinite(v)) << name;
}

TEST(RecipeRuns, PoisonedStepIsSkippedInFp16AndTheScaleBacksOff) {
  fs::path dir = fresh_dir("poison-fp16");
  recipes::TrainOptions o = readme_run(dir);
  o.stop_after = 0;
  o.steps = 6;
  o.precision = "fp16";
  o.loss_scale = 1024;  // small enough that no clean step overflows
  o.poison_step = 3;
  Lines out;
  recipes::TrainResult r = recipes::train(o, out.log());
  EXPECT_EQ(r.steps_done, 6);
  EXPECT_EQ(r.skipped_steps, 1);
  EXPECT_TRUE(out.has("step 3: skipped, inf/NaN gradients; loss scale -> 512"));
  Checkpoint ck = load_checkpoint(r.checkpoint);
  EXPECT_EQ(ck.state.at("optimizer_step"), 5) << "the poisoned step did not update the weights";
  for (const auto& [name, t] : ck.model)
    for (float v : t.to_vector<float>()) ASSERT_TRUE(std::isfinite(v)) << name;
}

// `kiln eval` and the end of training report the same numbers, bit for bit.
TEST(RecipeRuns, EvalAgreesWithTrainingOnTheSameCheckpoint) {
  fs::path dir = fresh_dir("gpt-eval");
  recipes::TrainOptions o;
  o.recipe = "fortunes-gpt";
  o.steps = 2;
  o.batch_size = 4;  // not the validation batch: validation must not depend on it
  o.out_dir = dir.string();
  o.progress = false;
  o.threads = 2;
  o.cache_dir = std::string(KILN_BINARY_DIR) + "/test-cache";
  recipes::TrainResult r = recipes::train(o, [](const std::string&) {});
  recipes::EvalResult e = recipes::evaluate(dir.string(), Device::cpu(), [](const std::string&) {});
  EXPECT_EQ(r.val_loss, e.loss);
  EXPECT_EQ(r.val_bits_per_byte, e.bits_per_byte);
}

// Weighted by tokens: batching the same windows differently (a short last
// batch or none) gives the same mean up to float rounding.
TEST(RecipeRuns, ValidationLossIsWeightedByTokens) {
  Generator init(3);
  models::GptConfig c;
  c.vocab_size = 50;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  models::Gpt model(c, init, std::make_shared<Generator>(0));
  std::vector<int32_t> tokens;
  for (int i = 0; i < 8 * 5 + 1; ++i) tokens.push_back(int32_t((i * 7 + i / 3) % 50));  // 5 windows
  const double one_by_one = recipes::validation_loss(model, tokens, 1, Device::cpu());
  const double four_then_one = recipes::validation_loss(model, tokens, 4, Device::cpu());
  EXPECT_NEAR(four_then_one, one_by_one, 1e-6 * one_by_one);
}

TEST(RecipeRuns, OneTableServesEveryCommand) {
  std::vector<std::string> names = recipes::recipe_names();
  EXPECT_EQ(names, (std::vector<std::string>{"fashion-mlp", "fashion-cnn", "fashion-fast", "fortunes-gpt",
                                              "fortunes-classify", "sft", "classify"}));
  for (const auto& name : names) {
    const recipes::Recipe& r = recipes::find_recipe(name);
    EXPECT_EQ(r.name(), name);
    EXPECT_FALSE(r.summary().empty());
    EXPECT_NE(recipes::describe_recipes().find(name + ": " + r.summary()), std::string::npos);
  }
  EXPECT_TRUE(recipes::find_recipe("fortunes-gpt").can_sample());
  EXPECT_FALSE(recipes::find_recipe("fashion-cnn").can_sample());
  EXPECT_EQ(recipes::find_recipe("fashion-mlp").kind(), recipes::ModelKind::image_classifier);
  EXPECT_EQ(recipes::find_recipe("fortunes-classify").kind(), recipes::ModelKind::text_classifier);
  EXPECT_EQ(recipes::find_recipe("sft").kind(), recipes::ModelKind::language_model);
  EXPECT_EQ(recipes::find_recipe("classify").kind(), recipes::ModelKind::text_classifier);
  EXPECT_TRUE(recipes::is_image_recipe("fashion-fast"));
  EXPECT_FALSE(recipes::is_image_recipe("fortunes-gpt"));
  EXPECT_FALSE(recipes::is_image_recipe("no-such"));
  EXPECT_EQ(recipes::image_recipe_names(), "fashion-mlp, fashion-cnn, fashion-fast");
  try {
    recipes::find_recipe("no-such");
    ADD_FAILURE() << "an unknown recipe must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fashion-mlp, fashion-cnn, fashion-fast, fortunes-gpt, fortunes-classify, sft, classify"),
              std::string::npos);
  }
}

// logits [B, T, C] with targets [T, B] have matching element counts but
// pair rows wrongly; they must be refused.
TEST(RecipeRuns, CrossEntropyChecksShapesExactly) {
  Tensor logits = zeros({2, 3, 5});
  Tensor ok = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 0}, {2, 3});
  Tensor swapped = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 0}, {3, 2});
  Tensor flat = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 0}, {6});
  EXPECT_NO_THROW(cross_entropy(logits, ok));
  EXPECT_THROW(cross_entropy(logits, swapped), Error);
  EXPECT_THROW(cross_entropy(logits, flat), Error);
  EXPECT_NO_THROW(cross_entropy(reshape(logits, {6, 5}), flat));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A 2-step fortunes-gpt run of a 1-layer, 32-wide GPT with a 16-token context.
recipes::TrainOptions tiny_gpt_run(const fs::path& dir) {
  recipes::TrainOptions o;
  o.recipe = "fortunes-gpt";
  o.steps = 2;
  o.batch_size = 2;
  o.model_overrides = {{"n_layer", 1}, {"n_embd", 32}, {"n_head", 2}, {"block_size", 16}};
  o.out_dir = dir.string();
  o.progress = false;
  o.threads = 2;
  o.cache_dir = std::string(KILN_BINARY_DIR) + "/test-cache";
  return o;
}

// What kiln serve runs for /v1/completions: a completion started and
// advanced a token at a time, alone or in a batch with others (continuous
// batching), gives exactly the text of Gpt::generate with the same seed,
// across the end of the context window; the streamed pieces make that text.
TEST(RecipeRuns, CompletionsAloneAndBatchedMatchGenerate) {
  fs::path dir = fresh_dir("gpt-completions");
  recipes::train(tiny_gpt_run(dir), [](const std::string&) {});
  const std::string ck_dir = *latest_checkpoint(dir.string());
  Checkpoint ck = load_checkpoint(ck_dir);
  const data::Tokenizer tok = recipes::load_run_tokenizer(ck_dir, ck);
  Generator init(0);
  models::Gpt gpt(models::GptConfig::from_json(ck.state.at("config")), init, std::make_shared<Generator>(0));
  gpt.load_parameters(recipes::to_pairs(ck.model));
  gpt.eval();
  recipes::LoadedModel served = recipes::load_for_inference(dir.string(), Device::cpu());

  const std::string prompt = "The ";
  std::vector<recipes::CompletionOptions> options;
  std::vector<std::string> expected;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    recipes::CompletionOptions co;
    co.max_tokens = 10 + int64_t(seed) * 9;  // up to 46 tokens: past the 16-token context
    co.sampling.temperature = 1.0;
    co.sampling.top_k = 0;
    co.seed = seed;
    options.push_back(co);
    std::vector<int32_t> ids{tok.end_of_text_id()}, fresh;
    for (int32_t t : tok.encode(prompt)) ids.push_back(t);
    Generator gen(seed);
    gpt.generate(ids, co.max_tokens, co.sampling.temperature, co.sampling.top_k, gen, co.sampling.top_p, [&](int32_t t) {
      if (t == tok.end_of_text_id()) return false;
      fresh.push_back(t);
      return true;
    });
    expected.push_back(tok.decode(fresh));
  }
  int64_t lengths = 0;  // the longest
  for (size_t i = 0; i < options.size(); ++i) {
    std::string streamed;
    const recipes::Completion alone =
        served.model->complete(prompt, options[i], [&](const std::string& piece) { streamed += piece; });
    EXPECT_EQ(alone.text, expected[i]) << "seed " << options[i].seed;
    EXPECT_EQ(streamed, alone.text);
    lengths = std::max(lengths, alone.completion_tokens);
  }
  EXPECT_GT(lengths, 16) << "some completion should run past the context window";
  std::vector<std::unique_ptr<recipes::PendingCompletion>> running;
  std::vector<recipes::PendingCompletion*> batch;
  for (const auto& co : options) {
    running.push_back(served.model->start_completion(prompt, co));
    batch.push_back(running.back().get());
  }
  for (int step = 0; step < 100; ++step) served.model->advance_completions(batch);
  for (size_t i = 0; i < options.size(); ++i) {
    ASSERT_TRUE(running[i]->finished());
    EXPECT_EQ(running[i]->result().text, expected[i]) << "seed " << options[i].seed << " in a batch";
  }
  // Started together, prompts of different lengths in one padded batch, then decoded together.
  std::vector<std::string> prompts;
  for (size_t i = 0; i < options.size(); ++i) prompts.push_back(i % 2 ? prompt : "A longer prompt, for padding: ");
  running = served.model->start_completions(prompts, options);
  batch.clear();
  for (auto& r : running) batch.push_back(r.get());
  for (int step = 0; step < 100; ++step) served.model->advance_completions(batch);
  for (size_t i = 0; i < options.size(); ++i) {
    ASSERT_TRUE(running[i]->finished());
    EXPECT_EQ(running[i]->result().text, served.model->complete(prompts[i], options[i], {}).text)
        << "seed " << options[i].seed << ", started together";
  }
}

// --preset/--n-layer... shape the GPT; the saved config is what a resume
// builds, and a different one is refused.
TEST(RecipeRuns, GptModelOverridesAreSavedAndKeptOnResume) {
  fs::path dir = fresh_dir("gpt-overrides");
  recipes::TrainOptions o = tiny_gpt_run(dir);
  o.stop_after = 1;
  Lines out;
  recipes::train(o, out.log());
  EXPECT_TRUE(out.has("(1 layers, 2 heads, 32 wide, context 16)"));
  Checkpoint ck = load_checkpoint(*latest_checkpoint(dir.string()));
  EXPECT_EQ(ck.state.at("config").at("n_embd"), 32);
  recipes::TrainOptions again = o;
  again.model_overrides.clear();
  again.stop_after = 0;
  again.resume = true;
  EXPECT_EQ(recipes::train(again, [](const std::string&) {}).start_step, 1) << "the saved model, no options needed";
  recipes::TrainOptions bigger = o;
  bigger.resume = true;
  bigger.steps = 3;
  bigger.model_overrides["n_layer"] = 2;
  EXPECT_NE(error_of(bigger).find("differs from the run's saved model"), std::string::npos);
  recipes::TrainOptions small_vocab = o;
  small_vocab.out_dir = fresh_dir("gpt-small-vocab").string();
  small_vocab.model_overrides["vocab_size"] = 100;
  EXPECT_NE(error_of(small_vocab).find("is smaller than the tokenizer's"), std::string::npos);
}

}  // namespace
}  // namespace kiln
