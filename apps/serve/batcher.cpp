#include "apps/serve/batcher.h"

#include <algorithm>

#include "kiln/backend/backend.h"
#include "kiln/backend/factory.h"

namespace kiln::serve {

Batcher::Batcher(std::string model, BatchOptions options, RunBatch run, Metrics& metrics, std::optional<int64_t> pad)
    : model_(std::move(model)), options_(options), run_(std::move(run)), metrics_(metrics), pad_(pad) {
  KILN_CHECK(options_.max_batch > 0 && options_.max_queue > 0 && options_.max_delay_us >= 0,
             "batching: --max-batch and --max-queue must be > 0 and --max-delay-us >= 0");
  thread_ = std::thread([this] { loop(); });
}

Batcher::~Batcher() { stop(); }

void Batcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<std::future<Tensor>> Batcher::submit(const Tensor& rows) {
  KILN_CHECK(rows.dim() >= 1 && rows.size(0) >= 1 && rows.size(0) <= options_.max_batch, "a request may hold 1 to ",
             options_.max_batch, " rows (--max-batch), got ", rows.dim() >= 1 ? rows.size(0) : 0);
  std::future<Tensor> result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || int64_t(queue_.size()) >= options_.max_queue) return std::nullopt;
    queue_.push_back({rows, {}, std::chrono::steady_clock::now()});
    result = queue_.back().result.get_future();
    metrics_.queue_depth(model_, int64_t(queue_.size()));
  }
  wake_.notify_all();
  return result;
}

void Batcher::loop() {
  use_num_threads_on_this_thread();
  for (;;) {
    std::vector<Request> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      // Wait for company until the oldest request's delay is up or a full batch is queued.
      const auto deadline = queue_.front().arrived + std::chrono::microseconds(options_.max_delay_us);
      auto queued_rows = [&] {
        int64_t rows = 0;
        for (const Request& r : queue_) rows += r.rows.size(0);
        return rows;
      };
      wake_.wait_until(lock, deadline, [&] { return stopping_ || queued_rows() >= options_.max_batch; });
      int64_t rows = 0;
      while (!queue_.empty() && rows + queue_.front().rows.size(0) <= options_.max_batch) {
        rows += queue_.front().rows.size(0);
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      metrics_.queue_depth(model_, int64_t(queue_.size()));
    }
    run(batch);
  }
}

void Batcher::run(std::vector<Request>& batch) {
  const auto started = std::chrono::steady_clock::now();
  for (const Request& r : batch) metrics_.queue_wait(std::chrono::duration<double>(started - r.arrived).count());
  try {
    // The rows' shape after their count; with pad_, the last dim is the longest.
    Shape shape = batch.front().rows.shape();
    const size_t padded = pad_ && shape.size() >= 2 ? 1 : 0;  // trailing dims that may differ
    int64_t total = 0;
    for (const Request& r : batch) {
      const Shape& s = r.rows.shape();
      KILN_CHECK(s.size() == shape.size() && std::equal(s.begin() + 1, s.end() - padded, shape.begin() + 1),
                 "requests in one batch must share their row shape");
      if (padded) shape.back() = std::max(shape.back(), s.back());
      total += r.rows.size(0);
    }
    shape[0] = total;
    const DType dtype = batch.front().rows.dtype();
    Tensor rows = padded ? full(shape, double(*pad_), dtype, Device::cpu()) : Tensor::empty(shape, dtype, Device::cpu());
    int64_t at = 0;
    for (const Request& r : batch) {
      Tensor slot = rows.slice(0, at, at + r.rows.size(0));
      if (padded) slot = slot.slice(int64_t(shape.size()) - 1, 0, r.rows.shape().back());
      copy_into(r.rows, slot);
      at += r.rows.size(0);
    }
    metrics_.batch(model_, total);
    const Tensor out = run_(rows);
    at = 0;
    for (Request& r : batch) {
      r.result.set_value(out.slice(0, at, at + r.rows.size(0)).contiguous());
      at += r.rows.size(0);
    }
  } catch (...) {
    for (Request& r : batch) r.result.set_exception(std::current_exception());
  }
}

}  // namespace kiln::serve
