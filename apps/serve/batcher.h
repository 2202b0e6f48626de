// Dynamic batching for one model, as Triton does it: requests wait in a
// bounded queue; a single thread takes up to `max_batch` rows, or whatever
// has arrived `max_delay_us` after the oldest request, runs them as one
// batch on the device, and hands each request its rows of the result.
// Overload is refused at the queue (submit returns nothing: HTTP 503),
// never by letting requests pile up.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "apps/serve/metrics.h"
#include "kiln/core/tensor.h"

namespace kiln::serve {

struct BatchOptions {
  int64_t max_batch = 32;       // rows per batch
  int64_t max_delay_us = 2000;  // how long the oldest request waits for company
  int64_t max_queue = 512;      // requests waiting; more are refused
};

class Batcher {
 public:
  // rows [N, ...] -> results [N, ...]
  using RunBatch = std::function<Tensor(const Tensor& rows)>;
  // With `pad`, requests' rows may differ in their last dim (token rows of
  // different lengths); a batch pads the shorter ones with it.
  Batcher(std::string model, BatchOptions options, RunBatch run, Metrics& metrics,
          std::optional<int64_t> pad = std::nullopt);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues a request of rows [k, ...] (k <= max_batch); nothing if the queue is full.
  std::optional<std::future<Tensor>> submit(const Tensor& rows);
  // Runs what is queued, then ends the thread.
  void stop();

 private:
  struct Request {
    Tensor rows;
    std::promise<Tensor> result;
    std::chrono::steady_clock::time_point arrived;
  };
  void loop();
  void run(std::vector<Request>& batch);

  std::string model_;
  BatchOptions options_;
  RunBatch run_;
  Metrics& metrics_;
  std::optional<int64_t> pad_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Request> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kiln::serve
