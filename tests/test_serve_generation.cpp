// The serving scheduler (apps/serve/generation.h) over the paged KV cache:
// a completion whose client hangs up leaves the running batch at the next
// step and gives its pages back to the pool, while the others go on.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "apps/recipes/hf_inference.h"
#include "apps/serve/generation.h"
#include "kiln/nn/kv_cache.h"
#include "tests/hf_test_util.h"

namespace kiln {
namespace {

// A model whose decoding steps take a while, so that a hang-up always comes mid-reply.
class SlowModel final : public recipes::InferenceModel {
 public:
  explicit SlowModel(recipes::InferenceModel& inner) : inner_(inner) {}
  std::vector<std::unique_ptr<recipes::PendingCompletion>> start_completions(
      const std::vector<std::string>& prompts, const std::vector<recipes::CompletionOptions>& options) override {
    return inner_.start_completions(prompts, options);
  }
  void advance_completions(const std::vector<recipes::PendingCompletion*>& batch) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    inner_.advance_completions(batch);
  }
  const nn::KvPool* kv_pool() const override { return inner_.kv_pool(); }

 private:
  recipes::InferenceModel& inner_;
};

std::shared_ptr<serve::GenerationJob> job_for(const std::string& prompt) {
  auto job = std::make_shared<serve::GenerationJob>();
  job->prompt = prompt;
  job->options.max_tokens = 100;
  job->options.temperature = 0;
  job->options.ignore_eos = true;
  return job;
}

bool wait_until(const std::function<bool()>& done) {
  for (int i = 0; i < 400 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return done();
}

TEST(ServeGeneration, AHungUpCompletionGivesItsPagesBackWhileTheOthersGoOn) {
  auto loaded = recipes::load_hf_for_inference(hf_test::fixture("llama-gqa"), Device::cpu());
  SlowModel slow(*loaded.model);
  serve::Metrics metrics;
  serve::GenerationScheduler scheduler("m", slow, serve::BatchOptions{}, metrics);
  auto leaving = job_for("The best way to learn is"), staying = job_for("A fortune: you will");
  ASSERT_TRUE(scheduler.submit(leaving));
  ASSERT_TRUE(scheduler.submit(staying));
  auto started = [](const std::shared_ptr<serve::GenerationJob>& j) {
    std::lock_guard<std::mutex> lock(j->mutex);
    return j->started;
  };
  ASSERT_TRUE(wait_until([&] { return started(leaving) && started(staying); }));
  const nn::KvPool* pool = loaded.model->kv_pool();
  ASSERT_NE(pool, nullptr);
  const int64_t both = pool->pages_held();
  EXPECT_GE(both, 2);  // a page each at least
  leaving->cancelled = true;  // what the server does when the client hangs up
  ASSERT_TRUE(wait_until([&] { return pool->pages_held() < both; }));
  {
    std::lock_guard<std::mutex> lock(staying->mutex);
    EXPECT_FALSE(staying->finished);  // 100 tokens at 5 ms a step: still decoding
  }
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard<std::mutex> lock(staying->mutex);
    return staying->finished;
  }));
  EXPECT_TRUE(wait_until([&] { return pool->pages_held() == 0; }));
  {
    std::lock_guard<std::mutex> lock(leaving->mutex);
    EXPECT_FALSE(leaving->finished);
    EXPECT_FALSE(leaving->error);
  }
  EXPECT_NE(metrics.prometheus().find("kiln_kv_cache_pages_in_use{model=\"m\"} 0"), std::string::npos);
}

}  // namespace
}  // namespace kiln
