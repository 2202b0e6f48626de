#include "kiln/backend/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

namespace kiln {

namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_mutex;
std::map<std::string, OpTime> g_times;

// Forwards every op to `inner_`, timing it. The device is synchronised after
// each op so asynchronous (CUDA) work is charged to the op that launched it.
class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}
  DeviceType type() const override { return inner_.type(); }
  std::string name() const override { return inner_.name(); }
  int device_count() const override { return inner_.device_count(); }
  void synchronize(int device_index) override { inner_.synchronize(device_index); }

  void copy(const Tensor& src, Tensor& dst) override {
    timed("copy", [&] { inner_.copy(src, dst); });
  }
  void fill(Tensor& dst, double value) override {
    timed("fill", [&] { inner_.fill(dst, value); });
  }
  void unary(UnaryOp op, const Tensor& x, Tensor& out, double scalar) override {
    timed("unary", [&] { inner_.unary(op, x, out, scalar); });
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override {
    timed("binary", [&] { inner_.binary(op, a, b, out); });
  }
  void reduce(ReduceOp op, const Tensor& x, Tensor& out) override {
    timed("reduce", [&] { inner_.reduce(op, x, out); });
  }
  void argmax(const Tensor& x, int dim, Tensor& out_i64) override {
    timed("argmax", [&] { inner_.argmax(x, dim, out_i64); });
  }
  void matmul(const Tensor& a, const Tensor& b, Tensor& out, const MatmulArgs& args) override {
    timed("matmul", [&] { inner_.matmul(a, b, out, args); });
  }
  void softmax(const Tensor& x, Tensor& out, bool log) override {
    timed("softmax", [&] { inner_.softmax(x, out, log); });
  }
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override {
    timed("softmax_backward", [&] { inner_.softmax_backward(y, dy, dx, log); });
  }
  void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& dlogits, float dlogits_scale,
                     int64_t ignore_index) override {
    timed("cross_entropy",
          [&] { inner_.cross_entropy(logits, targets, losses, dlogits, dlogits_scale, ignore_index); });
  }
  void layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y, Tensor& mean,
                 Tensor& rstd) override {
    timed("layernorm", [&] { inner_.layernorm(x, weight, bias, eps, y, mean, rstd); });
  }
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) override {
    timed("layernorm_backward", [&] { inner_.layernorm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias); });
  }
  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override {
    timed("embedding", [&] { inner_.embedding(weight, ids, out); });
  }
  void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) override {
    timed("embedding_backward", [&] { inner_.embedding_backward(dout, ids, dweight); });
  }
  void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, const Conv2dArgs& args) override {
    timed("conv2d", [&] { inner_.conv2d(x, weight, bias, out, args); });
  }
  void conv2d_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, Tensor& dx, Tensor& dweight,
                       Tensor& dbias, const Conv2dArgs& args) override {
    timed("conv2d_backward", [&] { inner_.conv2d_backward(dout, x, weight, dx, dweight, dbias, args); });
  }
  void maxpool2d(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dArgs& args) override {
    timed("maxpool2d", [&] { inner_.maxpool2d(x, out, indices, args); });
  }
  void maxpool2d_backward(const Tensor& dout, const Tensor& indices, Tensor& dx) override {
    timed("maxpool2d_backward", [&] { inner_.maxpool2d_backward(dout, indices, dx); });
  }
  void dropout_mask(Tensor& mask, float p, uint64_t seed, uint64_t offset) override {
    timed("dropout_mask", [&] { inner_.dropout_mask(mask, p, seed, offset); });
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                 bool causal) override {
    timed("attention", [&] { inner_.attention(q, k, v, out, lse, scale, causal); });
  }
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, float scale, bool causal) override {
    timed("attention_backward", [&] { inner_.attention_backward(dout, q, k, v, out, lse, dq, dk, dv, scale, causal); });
  }
  void adamw_step(std::vector<ParamSlots>& params, const AdamWArgs& args) override {
    timed("adamw_step", [&] { inner_.adamw_step(params, args); });
  }
  void sgd_step(std::vector<ParamSlots>& params, const SgdArgs& args) override {
    timed("sgd_step", [&] { inner_.sgd_step(params, args); });
  }

 private:
  template <typename F>
  void timed(const char* op, F&& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    if (inner_.type() != DeviceType::cpu) inner_.synchronize(0);
    Profiler::record(inner_.name() + ":" + op,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  Backend& inner_;
};

}  // namespace

void Profiler::enable(bool on) { g_enabled = on; }
bool Profiler::enabled() { return g_enabled; }

void Profiler::reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_times.clear();
}

std::map<std::string, OpTime> Profiler::snapshot() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_times;
}

void Profiler::record(const std::string& key, double seconds) {
  std::lock_guard<std::mutex> lock(g_mutex);
  OpTime& t = g_times[key];
  t.calls += 1;
  t.seconds += seconds;
}

std::string Profiler::report(double total_seconds) {
  std::vector<std::pair<std::string, OpTime>> rows;
  double ops = 0;
  for (const auto& [key, t] : snapshot()) {
    rows.emplace_back(key, t);
    ops += t.seconds;
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::string out = "op                         calls      seconds   share  us/call\n";
  char line[160];
  auto share = [&](double s) { return total_seconds > 0 ? 100.0 * s / total_seconds : 0.0; };
  for (const auto& [key, t] : rows) {
    std::snprintf(line, sizeof line, "%-24s %8lld %12.3f %6.1f%% %8.1f\n", key.c_str(), (long long)t.calls, t.seconds,
                  share(t.seconds), 1e6 * t.seconds / double(std::max<int64_t>(1, t.calls)));
    out += line;
  }
  std::snprintf(line, sizeof line, "%-24s %8s %12.3f %6.1f%%   (autograd, allocation, data, host code)\n",
                "framework overhead", "", std::max(0.0, total_seconds - ops),
                share(std::max(0.0, total_seconds - ops)));
  out += line;
  std::snprintf(line, sizeof line, "%-24s %8s %12.3f\n", "total", "", total_seconds);
  return out + line;
}

Backend& profiling_backend(Backend& inner) {
  // One wrapper per backend, kept for the program's life (handed out by reference).
  static std::mutex mutex;
  static std::map<Backend*, std::unique_ptr<ProfilingBackend>> wrappers;
  std::lock_guard<std::mutex> lock(mutex);
  auto& w = wrappers[&inner];
  if (!w) w = std::make_unique<ProfilingBackend>(inner);
  return *w;
}

}  // namespace kiln
