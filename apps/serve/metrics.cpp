#include "apps/serve/metrics.h"

#include <cstdio>

namespace kiln::serve {

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string with(const std::string& labels, const std::string& more) {
  return "{" + labels + (labels.empty() || more.empty() ? "" : ",") + more + "}";
}

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& labels) const {
  std::string out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket" + with(labels, "le=\"" + le + "\"") + " " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum" + (labels.empty() ? "" : "{" + labels + "}") + " " + number(sum_) + "\n";
  out += name + "_count" + (labels.empty() ? "" : "{" + labels + "}") + " " + std::to_string(count_) + "\n";
  return out;
}

void Metrics::request(const std::string& endpoint, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
  latency_.observe(seconds);
}

void Metrics::queue_wait(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_wait_.observe(seconds);
}

void Metrics::batch(const std::string& model, int64_t rows) {
  std::lock_guard<std::mutex> lock(mutex_);
  batch_rows_.try_emplace(model, std::vector<double>{1, 2, 4, 8, 16, 32, 64, 128, 256}).first->second.observe(
      double(rows));
}

void Metrics::queue_depth(const std::string& model, int64_t depth) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_depth_[model] = depth;
}

void Metrics::tokens(const std::string& model, int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  tokens_[model] += uint64_t(n);
}

void Metrics::kv_cache(const std::string& model, int64_t pages, int64_t held, int64_t cached, int64_t reused) {
  std::lock_guard<std::mutex> lock(mutex_);
  kv_cache_[model] = {pages, held, cached, reused};
}

std::string Metrics::prometheus() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = "# HELP kiln_requests_total HTTP requests by endpoint and status code.\n"
                    "# TYPE kiln_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += "kiln_requests_total{endpoint=\"" + key.first + "\",code=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(n) + "\n";
  out += "# HELP kiln_request_duration_seconds Time from a request's arrival to its response.\n"
         "# TYPE kiln_request_duration_seconds histogram\n" + latency_.render("kiln_request_duration_seconds");
  out += "# HELP kiln_queue_wait_seconds Time a request waited in its model's queue before its batch ran.\n"
         "# TYPE kiln_queue_wait_seconds histogram\n" + queue_wait_.render("kiln_queue_wait_seconds");
  out += "# HELP kiln_batch_size Rows (examples) per batch run on the device.\n# TYPE kiln_batch_size histogram\n";
  for (const auto& [model, h] : batch_rows_) out += h.render("kiln_batch_size", "model=\"" + model + "\"");
  out += "# HELP kiln_queue_depth Requests waiting in a model's queue.\n# TYPE kiln_queue_depth gauge\n";
  for (const auto& [model, d] : queue_depth_)
    out += "kiln_queue_depth{model=\"" + model + "\"} " + std::to_string(d) + "\n";
  out += "# HELP kiln_tokens_generated_total Completion tokens generated.\n# TYPE kiln_tokens_generated_total counter\n";
  for (const auto& [model, n] : tokens_)
    out += "kiln_tokens_generated_total{model=\"" + model + "\"} " + std::to_string(n) + "\n";
  const std::pair<const char*, int64_t KvCacheState::*> kv_series[] = {
      {"kiln_kv_cache_pages", &KvCacheState::pages},
      {"kiln_kv_cache_pages_in_use", &KvCacheState::held},
      {"kiln_kv_cache_pages_cached", &KvCacheState::cached},
      {"kiln_prefix_cache_positions_total", &KvCacheState::reused}};
  const char* kv_help[] = {"Pages in a language model's KV cache pool (allocated).",
                           "KV cache pages held by running sequences.",
                           "KV cache pages no sequence holds, kept for their prefix until needed.",
                           "Prompt positions taken from the prefix cache instead of computed."};
  for (size_t i = 0; i < std::size(kv_series); ++i) {
    const bool counter = i == 3;
    out += std::string("# HELP ") + kv_series[i].first + " " + kv_help[i] + "\n# TYPE " + kv_series[i].first +
           (counter ? " counter\n" : " gauge\n");
    for (const auto& [model, state] : kv_cache_)
      out += std::string(kv_series[i].first) + "{model=\"" + model + "\"} " +
             std::to_string(state.*kv_series[i].second) + "\n";
  }
  return out;
}

}  // namespace kiln::serve
