// kiln train --fit under a --memory-budget a quarter of what plain training
// needs: the run fits, and its losses match the unconstrained run's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "apps/plan/fit.h"
#include "apps/plan/memory_probe.h"
#include "models/gpt/presets.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

recipes::TrainOptions small_gpt_run(const std::string& name, const std::string& device) {
  recipes::TrainOptions o;
  o.recipe = "fortunes-gpt";
  o.model_overrides = {{"n_layer", 4}, {"n_embd", 64}, {"n_head", 4}, {"block_size", 64}};
  o.batch_size = 16;
  o.steps = 20;
  o.stop_after = 20;  // skip the final validation pass
  o.device = Device::parse(device);
  o.out_dir = (fs::path(KILN_BINARY_DIR) / "test-fit" / name).string();
  fs::remove_all(o.out_dir);
  o.progress = false;
  o.threads = 2;
  o.cache_dir = std::string(KILN_BINARY_DIR) + "/test-cache";
  return o;
}

std::vector<double> losses(const std::string& out_dir) {
  std::ifstream in(fs::path(out_dir) / "metrics.jsonl");
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.at("kind") == "train") out.push_back(j.at("loss").get<double>());
  }
  return out;
}

TEST(Fit, AGptAtAQuarterOfItsMemoryTrainsAndMatchesTheUnconstrainedRun) {
  // The plain step's peak, from the planner (exact, see test_plan_memory.cpp).
  plan::PlanInput in;
  in.recipe = "fortunes-gpt";
  nlohmann::json config = models::gpt_preset("fortunes").to_json();
  config.update({{"n_layer", 4}, {"n_embd", 64}, {"n_head", 4}, {"block_size", 64}});
  in.gpt = models::GptConfig::from_json(config);
  in.batch_size = 16;
  const size_t plain_peak = plan::probe_step(in, {"fp32", "none", 16, false}, Device::meta()).peak;
  const size_t budget = plain_peak / 4;

  auto quiet = [](const std::string&) {};
  recipes::TrainOptions free_run = small_gpt_run("unconstrained", "cpu:61");
  recipes::train(free_run, quiet);

  // Without --fit the budget is exceeded, with the helpful error.
  recipes::TrainOptions tight = small_gpt_run("tight", "cpu:62");
  tight.memory_budget = budget;
  try {
    recipes::train(tight, quiet);
    ADD_FAILURE() << "plain training fit in a quarter of its peak";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("--fit"), std::string::npos) << e.what();
  }

  recipes::TrainOptions fitted = small_gpt_run("fitted", "cpu:63");
  fitted.memory_budget = budget;
  std::vector<std::string> lines;
  plan::apply_fit(fitted, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("--fit: fp32"), std::string::npos) << lines[0];
  recipes::train(fitted, quiet);
  EXPECT_LE(allocator_for(Device::parse("cpu:63")).stats().peak, budget) << lines[0];

  std::vector<double> a = losses(free_run.out_dir), b = losses(fitted.out_dir);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(a[i]));
  std::printf("[fit] budget %zu bytes (plain peak %zu); %s; worst relative loss difference over 20 steps %.2e\n",
              budget, plain_peak, lines[0].c_str(), worst);
  EXPECT_LT(worst, 1e-5) << "fp32 rounding only";
}

}  // namespace
}  // namespace kiln
