// The serving scheduler (apps/serve/generation.h) over the paged KV cache:
// a completion whose client hangs up leaves the running batch at the next
// step and gives its pages back to the pool, while the others go on.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "apps/recipes/hf_inference.h"
#include "apps/serve/generation.h"
#include "kiln/nn/kv_cache.h"
#include "tests/hf_test_util.h"

namespace kiln {
namespace {

// A model whose decoding steps wait for the test's leave, so that what the
// scheduler has done at each check is fixed (a model that merely slept
// raced the test's polling on a loaded machine: CI failed stop 59 on it).
class GatedModel final : public recipes::InferenceModel {
 public:
  explicit GatedModel(recipes::InferenceModel& inner) : inner_(inner) {}
  std::vector<std::unique_ptr<recipes::PendingCompletion>> start_completions(
      const std::vector<std::string>& prompts, const std::vector<recipes::CompletionOptions>& options) override {
    return inner_.start_completions(prompts, options);
  }
  void advance_completions(const std::vector<recipes::PendingCompletion*>& batch) override {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      waiting_ = true;
      allowed_.wait(lock, [&] { return open_ || steps_left_ > 0; });
      waiting_ = false;
      if (!open_) --steps_left_;
    }
    inner_.advance_completions(batch);
  }
  const nn::KvPool* kv_pool() const override { return inner_.kv_pool(); }

  void allow_steps(int steps) {
    std::lock_guard<std::mutex> lock(mutex_);
    steps_left_ += steps;
    allowed_.notify_all();
  }
  // Lets a step through if one waits (and none is let through yet).
  void step_if_waiting() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (waiting_ && steps_left_ == 0) ++steps_left_;
    allowed_.notify_all();
  }
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    allowed_.notify_all();
  }

 private:
  recipes::InferenceModel& inner_;
  std::mutex mutex_;
  std::condition_variable allowed_;
  int steps_left_ = 0;
  bool waiting_ = false, open_ = false;
};

// Opens the gate when the test leaves early, before the scheduler (declared
// earlier, so destroyed later) waits for its loop to end.
struct OpenOnExit {
  GatedModel& model;
  ~OpenOnExit() { model.open(); }
};

std::shared_ptr<serve::GenerationJob> job_for(const std::string& prompt) {
  auto job = std::make_shared<serve::GenerationJob>();
  job->prompt = prompt;
  job->options.max_tokens = 100;
  job->options.sampling.temperature = 0;
  job->options.ignore_eos = true;
  return job;
}

// Polls for up to 20 s: long enough for a loaded machine, and it returns as soon as `done` holds.
bool wait_until(const std::function<bool()>& done) {
  for (int i = 0; i < 4000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return done();
}

TEST(ServeGeneration, AHungUpCompletionGivesItsPagesBackWhileTheOthersGoOn) {
  auto loaded = recipes::load_hf_for_inference(hf_test::fixture("llama-gqa"), Device::cpu());
  GatedModel gated(*loaded.model);
  serve::Metrics metrics;
  serve::GenerationScheduler scheduler("m", gated, serve::BatchOptions{}, metrics);
  OpenOnExit open_on_exit{gated};
  auto leaving = job_for("The best way to learn is"), staying = job_for("A fortune: you will");
  ASSERT_TRUE(scheduler.submit(leaving));
  ASSERT_TRUE(scheduler.submit(staying));
  auto holds = [](const std::shared_ptr<serve::GenerationJob>& j, bool serve::GenerationJob::*flag) {
    std::lock_guard<std::mutex> lock(j->signal->mutex);
    return (*j).*flag;
  };
  // Both prompts are in the cache. Should the scheduler have started the
  // first alone, its steps wait at the gate until the second joins: a few
  // tokens at most.
  ASSERT_TRUE(wait_until([&] {
    if (holds(leaving, &serve::GenerationJob::started) && holds(staying, &serve::GenerationJob::started)) return true;
    gated.step_if_waiting();
    return false;
  }));
  const nn::KvPool* pool = loaded.model->kv_pool();
  ASSERT_NE(pool, nullptr);
  const int64_t both = pool->pages_held();
  EXPECT_EQ(both, 2);  // each short prompt and its first tokens fit a page of 16 positions
  leaving->cancelled = true;  // what the server does when the client hangs up
  gated.allow_steps(1);       // staying's next token stays on its page
  ASSERT_TRUE(wait_until([&] { return pool->pages_held() == 1; }));
  EXPECT_FALSE(holds(staying, &serve::GenerationJob::finished));  // one step of 100 taken
  gated.open();
  ASSERT_TRUE(wait_until([&] { return holds(staying, &serve::GenerationJob::finished); }));
  EXPECT_TRUE(wait_until([&] { return pool->pages_held() == 0; }));
  EXPECT_FALSE(holds(leaving, &serve::GenerationJob::finished));
  {
    std::lock_guard<std::mutex> lock(leaving->signal->mutex);
    EXPECT_FALSE(leaving->error);
  }
  // The scheduler reports the pool after it drops a completion: wait for that report too.
  EXPECT_TRUE(wait_until([&] {
    return metrics.prometheus().find("kiln_kv_cache_pages_in_use{model=\"m\"} 0") != std::string::npos;
  }));
}

// A request's n choices are queued all or none: a queue without room for
// every one takes none of them, so no answer lacks a choice.
TEST(ServeGeneration, ARequestsChoicesAreQueuedAllOrNone) {
  auto loaded = recipes::load_hf_for_inference(hf_test::fixture("llama-gqa"), Device::cpu());
  GatedModel gated(*loaded.model);
  serve::Metrics metrics;
  serve::GenerationScheduler scheduler("m", gated, serve::BatchOptions{.max_queue = 3}, metrics);
  OpenOnExit open_on_exit{gated};
  const std::vector<std::shared_ptr<serve::GenerationJob>> two = {job_for("a"), job_for("b")};
  ASSERT_TRUE(scheduler.submit(two));
  EXPECT_FALSE(scheduler.submit({job_for("c"), job_for("d")}));  // 4 > 3: neither
  EXPECT_TRUE(scheduler.submit(job_for("e")));                   // the one place left
  EXPECT_FALSE(scheduler.submit(job_for("f")));
}

}  // namespace
}  // namespace kiln
