// Continuous batching of generation for one language model, as vLLM and
// TGI do it: a single thread keeps a running batch of completions and gives
// each one token per decode step, all in one forward pass. Between steps,
// finished and cancelled completions leave and queued ones join (their
// prompt runs first), so a new request never waits for a whole batch to end.
// The queue is bounded: submit refuses (HTTP 503) when it is full.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "apps/recipes/inference.h"
#include "apps/serve/batcher.h"
#include "apps/serve/metrics.h"

namespace kiln::serve {

// What a request's jobs (its n choices) share: one lock and one condition,
// so that its handler waits on all of them at once.
struct JobSignal {
  std::mutex mutex;
  std::condition_variable changed;
};

// One completion, shared by the HTTP handler that waits on it and the
// scheduler that fills it in.
// When a job's stages happened: its prompt began, its first token was made, it finished (Ollama's answers report
// the durations between them).
struct JobTimes {
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now(), prompt_started, first_token,
                                        finished;
};

struct GenerationJob {
  std::string prompt;
  recipes::CompletionOptions options;
  JobTimes times;  // arrived is set on creation; prompt_started by the scheduler; the rest under signal->mutex
  std::atomic<bool> cancelled{false};  // the client is gone or timed out: the scheduler drops it
  // A stream takes each step's text as it comes; a plain answer only the
  // result, so its handler is woken once, at the end, and not every step
  // (on a machine with as many cores as decoding threads, a wake per token
  // takes a core from the step).
  bool streamed = false;

  std::shared_ptr<JobSignal> signal = std::make_shared<JobSignal>();
  // Guarded by signal->mutex:
  std::deque<std::string> pieces;  // streamed: text made and not yet taken by the handler, a piece per step
  std::deque<recipes::TokenLogprob> token_logprobs;  // likewise, when the options ask for them
  bool started = false, finished = false;
  recipes::Completion result;  // once finished
  std::exception_ptr error;    // set instead of finished when the model failed
};

class GenerationScheduler {
 public:
  // options.max_batch: completions decoded together; options.max_queue:
  // completions running or waiting, beyond which submit refuses.
  GenerationScheduler(std::string model, recipes::InferenceModel& inference, BatchOptions options, Metrics& metrics);
  ~GenerationScheduler();
  GenerationScheduler(const GenerationScheduler&) = delete;
  GenerationScheduler& operator=(const GenerationScheduler&) = delete;

  // Queues the jobs, all or none; false if the queue has no room for them or the scheduler is stopping.
  bool submit(const std::vector<std::shared_ptr<GenerationJob>>& jobs);
  bool submit(const std::shared_ptr<GenerationJob>& job) { return submit(std::vector{job}); }
  int64_t max_queue() const { return options_.max_queue; }
  // Finishes every queued and running completion, then ends the thread.
  void stop();

 private:
  struct Running {
    std::shared_ptr<GenerationJob> job;
    std::unique_ptr<recipes::PendingCompletion> completion;
    int64_t tokens_counted = 0;  // in the metrics so far
    size_t logprobs_delivered = 0;
  };
  void loop();
  void join_waiting(std::vector<std::shared_ptr<GenerationJob>>& joining);
  void deliver(Running& r);

  std::string model_;
  recipes::InferenceModel& inference_;
  BatchOptions options_;
  Metrics& metrics_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<GenerationJob>> waiting_;
  size_t running_count_ = 0;  // running_.size(), for submit's bound
  bool stopping_ = false;
  std::vector<Running> running_;  // the scheduler thread's own
  std::thread thread_;
};

}  // namespace kiln::serve
