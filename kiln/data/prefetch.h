// Builds upcoming batches on a background thread while the consumer trains on
// the current one.
//
// The loaders describe a batch as a pure function of a LoaderState: make(s)
// builds the batch at s, advance(s) names the one after it, at_end(s) says a
// finite stream is over. Because a batch depends on nothing but its state,
// the prefetched stream is bitwise the stream a synchronous loader yields, and
// restoring a saved state just drops whatever was queued.
//
// Threading: one worker, started on the first next(), keeps up to `depth`
// batches queued. An exception in make() is stored and rethrown by the
// next() that would have returned that batch (earlier batches are delivered
// first); the following next() retries from the same state. The destructor
// stops the worker and joins it; at worst it waits for the one batch being
// built, so a consumer that stops early never hangs.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "kiln/backend/backend.h"
#include "kiln/data/loader_state.h"

namespace kiln::data {

template <typename Batch>
class Prefetcher {
 public:
  using Make = std::function<Batch(const LoaderState&)>;
  using Advance = std::function<LoaderState(const LoaderState&)>;
  using AtEnd = std::function<bool(const LoaderState&)>;

  // depth == 0 builds each batch on the caller's thread (no worker at all).
  // make/advance/at_end run on the worker thread and must own or share what
  // they read.
  Prefetcher(Make make, Advance advance, AtEnd at_end, LoaderState start, int depth)
      : make_(std::move(make)), advance_(std::move(advance)), at_end_(std::move(at_end)),
        depth_(depth < 0 ? 0 : size_t(depth)), consumer_state_(start), producer_state_(start) {}

  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The batch at state(), or nullopt when a finite stream is over.
  std::optional<Batch> next() {
    if (depth_ == 0) {
      if (at_end_ && at_end_(consumer_state_)) return std::nullopt;
      Batch b = make_(consumer_state_);
      consumer_state_ = advance_(consumer_state_);
      return b;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
    if (at_end_ && at_end_(consumer_state_)) return std::nullopt;
    cv_.wait(lock, [&] { return !queue_.empty() || error_; });
    if (!queue_.empty()) {
      Entry e = std::move(queue_.front());
      queue_.pop_front();
      consumer_state_ = advance_(e.state);
      cv_.notify_all();
      return std::move(e.batch);
    }
    std::exception_ptr error = error_;
    error_ = nullptr;
    producer_state_ = consumer_state_;  // retry the failed batch on the next call
    cv_.notify_all();
    std::rethrow_exception(error);
  }

  // The state of the batch the next call to next() returns.
  LoaderState state() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return consumer_state_;
  }

  // Continue from `s`: queued batches are dropped, and a batch in flight is
  // discarded when it completes.
  void reset(const LoaderState& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.clear();
    error_ = nullptr;
    consumer_state_ = producer_state_ = s;
    ++generation_;
    cv_.notify_all();
  }

 private:
  struct Entry {
    LoaderState state;
    Batch batch;
  };

  void run() {
    use_num_threads_on_this_thread();  // batches are made with the run's thread count (--threads)
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] {
        return stop_ || (!error_ && queue_.size() < depth_ && !(at_end_ && at_end_(producer_state_)));
      });
      if (stop_) return;
      const LoaderState s = producer_state_;
      const uint64_t generation = generation_;
      lock.unlock();
      std::optional<Batch> batch;
      std::exception_ptr error;
      try {
        batch.emplace(make_(s));
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (generation != generation_) continue;  // reset() while building: stale
      if (error) {
        error_ = error;
      } else {
        queue_.push_back(Entry{s, std::move(*batch)});
        producer_state_ = advance_(s);
      }
      cv_.notify_all();
    }
  }

  const Make make_;
  const Advance advance_;
  const AtEnd at_end_;
  const size_t depth_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  std::exception_ptr error_;
  LoaderState consumer_state_;
  LoaderState producer_state_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace kiln::data
