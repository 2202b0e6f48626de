#include "apps/serve/generation.h"

#include <algorithm>

#include "kiln/backend/backend.h"
#include "kiln/nn/kv_cache.h"

namespace kiln::serve {

GenerationScheduler::GenerationScheduler(std::string model, recipes::InferenceModel& inference, BatchOptions options,
                                         Metrics& metrics)
    : model_(std::move(model)), inference_(inference), options_(options), metrics_(metrics) {
  KILN_CHECK(options_.max_batch > 0 && options_.max_queue > 0, "generation: --max-batch and --max-queue must be > 0");
  thread_ = std::thread([this] { loop(); });
}

GenerationScheduler::~GenerationScheduler() { stop(); }

void GenerationScheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool GenerationScheduler::submit(const std::vector<std::shared_ptr<GenerationJob>>& jobs) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || int64_t(waiting_.size() + running_count_ + jobs.size()) > options_.max_queue) return false;
    waiting_.insert(waiting_.end(), jobs.begin(), jobs.end());
    metrics_.queue_depth(model_, int64_t(waiting_.size()));
  }
  wake_.notify_all();
  return true;
}

// Hands the job what its completion made since the last step.
void GenerationScheduler::deliver(Running& r) {
  std::string piece = r.completion->take_text();
  const bool finished = r.completion->finished();
  // Counted as made, so a long stream shows in the metrics while it runs,
  // and one whose client hung up still counts what it made.
  const int64_t made = r.completion->result().completion_tokens;
  metrics_.tokens(model_, made - r.tokens_counted);
  r.tokens_counted = made;
  const auto& logprobs = r.completion->result().logprobs;
  const bool streamed = r.job->streamed;
  {
    std::lock_guard<std::mutex> lock(r.job->signal->mutex);
    if (streamed && !piece.empty()) r.job->pieces.push_back(std::move(piece));
    for (; streamed && r.logprobs_delivered < logprobs.size(); ++r.logprobs_delivered)
      r.job->token_logprobs.push_back(logprobs[r.logprobs_delivered]);
    const auto now = std::chrono::steady_clock::now();
    if (!r.job->started) r.job->times.first_token = now;
    r.job->started = true;
    if (finished) r.job->times.finished = now;
    if (finished) {
      r.job->result = r.completion->result();
      r.job->finished = true;
    }
  }
  if (streamed || finished) r.job->signal->changed.notify_all();
}

namespace {
void fail(GenerationJob& job, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(job.signal->mutex);
    job.error = error;
  }
  job.signal->changed.notify_all();
}
}  // namespace

// Runs the joining jobs' prompts (and first tokens), as one batch, and adds
// them to the running batch. Should the batch fail, each prompt runs alone,
// so that an error reaches only the request it belongs to.
void GenerationScheduler::join_waiting(std::vector<std::shared_ptr<GenerationJob>>& joining) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<GenerationJob>> jobs;
  std::vector<std::string> prompts;
  std::vector<recipes::CompletionOptions> options;
  for (auto& job : joining) {
    if (job->cancelled) continue;
    metrics_.queue_wait(std::chrono::duration<double>(now - job->times.arrived).count());
    job->times.prompt_started = now;
    jobs.push_back(job);
    prompts.push_back(job->prompt);
    options.push_back(job->options);
  }
  if (jobs.empty()) return;
  std::vector<std::unique_ptr<recipes::PendingCompletion>> started;
  try {
    started = inference_.start_completions(prompts, options);
  } catch (...) {
    started.clear();
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    try {
      auto completion = i < started.size() ? std::move(started[i]) : inference_.start_completion(prompts[i], options[i]);
      running_.push_back({jobs[i], std::move(completion)});
      deliver(running_.back());
    } catch (...) {
      fail(*jobs[i], std::current_exception());
    }
  }
}

void GenerationScheduler::loop() {
  use_num_threads_on_this_thread();
  for (;;) {
    std::vector<std::shared_ptr<GenerationJob>> joining;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      if (waiting_.empty() && running_.empty()) return;  // stopping, and nothing left
      while (!waiting_.empty() && int64_t(running_.size() + joining.size()) < options_.max_batch) {
        joining.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
      running_count_ += joining.size();
      metrics_.queue_depth(model_, int64_t(waiting_.size()));
    }
    join_waiting(joining);
    // One decode step for every running completion that wants another token.
    std::vector<Running*> stepping;
    std::vector<recipes::PendingCompletion*> step;
    for (Running& r : running_)
      if (!r.completion->finished() && !r.job->cancelled) {
        stepping.push_back(&r);
        step.push_back(r.completion.get());
      }
    if (!step.empty()) {
      metrics_.batch(model_, int64_t(step.size()));
      try {
        inference_.advance_completions(step);
        for (Running* r : stepping) deliver(*r);
      } catch (...) {
        for (Running* r : stepping) fail(*r->job, std::current_exception());
      }
    }
    // Finished, failed and cancelled completions leave the batch, and their pages go back to the pool.
    std::erase_if(running_, [](const Running& r) {
      std::lock_guard<std::mutex> lock(r.job->signal->mutex);
      return r.job->finished || r.job->error || r.job->cancelled;
    });
    if (const nn::KvPool* pool = inference_.kv_pool())
      metrics_.kv_cache(model_, pool->pages(), pool->pages_held(), pool->pages_cached(), pool->reused_positions());
    std::lock_guard<std::mutex> lock(mutex_);
    running_count_ = running_.size();
  }
}

}  // namespace kiln::serve
