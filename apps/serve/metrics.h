// The server's counters, rendered in Prometheus' text format at /metrics:
// requests by endpoint and status, request latency and queue wait
// histograms, batch sizes, queue depth per model, tokens generated, and
// each language model's KV cache pages.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  // `name`_bucket{le=...}, _sum and _count lines, with `labels` ("a=\"b\"" or "").
  std::string render(const std::string& name, const std::string& labels = "") const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  void request(const std::string& endpoint, int status, double seconds);
  void queue_wait(double seconds);
  void batch(const std::string& model, int64_t rows);
  void queue_depth(const std::string& model, int64_t depth);
  void tokens(const std::string& model, int64_t n);
  // A language model's paged KV cache (kiln/nn/kv_cache.h): its pool's
  // pages, those held by running sequences and those cached for their
  // prefix, and the prompt positions taken from that cache so far.
  void kv_cache(const std::string& model, int64_t pages, int64_t held, int64_t cached, int64_t reused);
  std::string prometheus() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram latency_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
  Histogram queue_wait_{{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}};
  std::map<std::string, Histogram> batch_rows_;
  std::map<std::string, int64_t> queue_depth_;
  std::map<std::string, uint64_t> tokens_;
  struct KvCacheState {
    int64_t pages = 0, held = 0, cached = 0, reused = 0;
  };
  std::map<std::string, KvCacheState> kv_cache_;
};

}  // namespace kiln::serve
