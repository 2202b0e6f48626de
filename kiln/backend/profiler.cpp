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
std::atomic<bool> g_by_shape{false};
std::mutex g_mutex;
std::map<std::string, OpTime> g_times;

// " [2048, 512] bf16, [512, 128]^T bf16": shapes and dtypes, and which
// operands are strided (^T: a transposed matrix, ~: any other layout).
std::string operand_list(std::initializer_list<const Tensor*> operands) {
  std::string s;
  for (const Tensor* t : operands) {
    if (!t->defined()) continue;
    s += s.empty() ? " " : ", ";
    s += shape_str(t->shape());
    if (!t->is_contiguous()) s += t->dim() >= 2 && t->strides()[size_t(t->dim() - 2)] == 1 ? "^T" : "~";
    s += std::string(" ") + dtype_name(t->dtype());
  }
  return s;
}

// Forwards every op to `inner_`, timing it. The device is synchronised after
// each op so asynchronous (CUDA) work is charged to the op that launched it.
class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}
  DeviceType type() const override { return inner_.type(); }
  std::string name() const override { return inner_.name(); }
  int device_count() const override { return inner_.device_count(); }
  void synchronize(int device_index) override { inner_.synchronize(device_index); }
  // Capabilities and host transfers are forwarded as they are: profiling
  // must not change which path an op takes.
  bool fast_bf16_to_f32_matmul() const override { return inner_.fast_bf16_to_f32_matmul(); }
  int64_t efficient_gemm_rows() const override { return inner_.efficient_gemm_rows(); }
  void copy_to_host_async(const Tensor& src, Tensor& dst) override {
    timed("copy_to_host_async", {&src}, [&] { inner_.copy_to_host_async(src, dst); });
  }
  void finish_host_copies(int device_index) override {
    timed("finish_host_copies", {}, [&] { inner_.finish_host_copies(device_index); });
  }
  void pin_host_memory(const Tensor& host) override { inner_.pin_host_memory(host); }
  void unpin_host_memory(const Tensor& host) override { inner_.unpin_host_memory(host); }

  void copy(const Tensor& src, Tensor& dst) override {
    timed("copy", {&src, &dst}, [&] { inner_.copy(src, dst); });
  }
  void fill(Tensor& dst, double value) override {
    timed("fill", {&dst}, [&] { inner_.fill(dst, value); });
  }
  void unary(UnaryOp op, const Tensor& x, Tensor& out, double scalar) override {
    timed("unary", {&x, &out}, [&] { inner_.unary(op, x, out, scalar); });
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override {
    timed("binary", {&a, &b, &out}, [&] { inner_.binary(op, a, b, out); });
  }
  void reduce(ReduceOp op, const Tensor& x, Tensor& out) override {
    timed("reduce", {&x, &out}, [&] { inner_.reduce(op, x, out); });
  }
  void argmax(const Tensor& x, int dim, Tensor& out_i64) override {
    timed("argmax", {&x}, [&] { inner_.argmax(x, dim, out_i64); });
  }
  void matmul(const Tensor& a, const Tensor& b, Tensor& out, const MatmulArgs& args) override {
    timed("matmul", {&a, &b, &out}, [&] { inner_.matmul(a, b, out, args); });
  }
  void matmul_and_row_sums(const Tensor& a, const Tensor& b, Tensor& out, Tensor& row_sums) override {
    timed("matmul", {&a, &b, &out}, [&] { inner_.matmul_and_row_sums(a, b, out, row_sums); });
  }
  void softmax(const Tensor& x, Tensor& out, bool log) override {
    timed("softmax", {&x}, [&] { inner_.softmax(x, out, log); });
  }
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override {
    timed("softmax_backward", {&y}, [&] { inner_.softmax_backward(y, dy, dx, log); });
  }
  void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& dlogits, float dlogits_scale,
                     int64_t ignore_index) override {
    timed("cross_entropy", {&logits},
          [&] { inner_.cross_entropy(logits, targets, losses, dlogits, dlogits_scale, ignore_index); });
  }
  void layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y, Tensor& mean,
                 Tensor& rstd) override {
    timed("layernorm", {&x}, [&] { inner_.layernorm(x, weight, bias, eps, y, mean, rstd); });
  }
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) override {
    timed("layernorm_backward", {&x}, [&] { inner_.layernorm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias); });
  }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, bool plus_one, Tensor& y, Tensor& rstd) override {
    timed("rms_norm", {&x}, [&] { inner_.rms_norm(x, weight, eps, plus_one, y, rstd); });
  }
  void rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) override {
    timed("rotary", {&x}, [&] { inner_.rotary(x, cos, sin, y); });
  }
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override {
    timed("silu_mul", {&gate}, [&] { inner_.silu_mul(gate, up, out); });
  }
  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override {
    timed("embedding", {&weight, &ids}, [&] { inner_.embedding(weight, ids, out); });
  }
  void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) override {
    timed("embedding_backward", {&dout}, [&] { inner_.embedding_backward(dout, ids, dweight); });
  }
  void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, const Conv2dArgs& args) override {
    timed("conv2d", {&x, &weight}, [&] { inner_.conv2d(x, weight, bias, out, args); });
  }
  void conv2d_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, Tensor& dx, Tensor& dweight,
                       Tensor& dbias, const Conv2dArgs& args) override {
    timed("conv2d_backward", {&x, &weight}, [&] { inner_.conv2d_backward(dout, x, weight, dx, dweight, dbias, args); });
  }
  void maxpool2d(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dArgs& args) override {
    timed("maxpool2d", {&x}, [&] { inner_.maxpool2d(x, out, indices, args); });
  }
  void maxpool2d_backward(const Tensor& dout, const Tensor& indices, Tensor& dx) override {
    timed("maxpool2d_backward", {&dout}, [&] { inner_.maxpool2d_backward(dout, indices, dx); });
  }
  void dropout_mask(Tensor& mask, float p, uint64_t seed, uint64_t offset) override {
    timed("dropout_mask", {&mask}, [&] { inner_.dropout_mask(mask, p, seed, offset); });
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                 bool causal) override {
    timed("attention", {&q}, [&] { inner_.attention(q, k, v, out, lse, scale, causal); });
  }
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, float scale, bool causal) override {
    timed("attention_backward", {&q}, [&] { inner_.attention_backward(dout, q, k, v, out, lse, dq, dk, dv, scale, causal); });
  }
  void paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const Tensor& tables,
                       const Tensor& spans, Tensor& out, float scale, float softcap) override {
    timed("paged_attention", {&q},
          [&] { inner_.paged_attention(q, k_pages, v_pages, tables, spans, out, scale, softcap); });
  }
  void scatter_rows(const Tensor& src, const Tensor& offsets, int64_t column_stride, Tensor& dst) override {
    timed("scatter_rows", {&src}, [&] { inner_.scatter_rows(src, offsets, column_stride, dst); });
  }
  void quantized_matmul(const Tensor& x, const QuantizedMatrix& w, Tensor& out) override {
    timed("quantized_matmul", {&x}, [&] { inner_.quantized_matmul(x, w, out); });
  }
  void quantized_embedding(const QuantizedMatrix& w, const Tensor& ids, Tensor& out) override {
    timed("quantized_embedding", {&ids}, [&] { inner_.quantized_embedding(w, ids, out); });
  }
  void adamw_step(std::vector<ParamSlots>& params, const AdamWArgs& args) override {
    timed("adamw_step", {}, [&] { inner_.adamw_step(params, args); });
  }
  void sgd_step(std::vector<ParamSlots>& params, const SgdArgs& args) override {
    timed("sgd_step", {}, [&] { inner_.sgd_step(params, args); });
  }

 private:
  template <typename F>
  void timed(const char* op, std::initializer_list<const Tensor*> operands, F&& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    if (inner_.type() != DeviceType::cpu) inner_.synchronize(0);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string key = inner_.name() + ":" + op;
    if (g_by_shape) key += operand_list(operands);
    Profiler::record(key, seconds);
  }
  Backend& inner_;
};

}  // namespace

void Profiler::enable(bool on, bool by_shape) {
  g_enabled = on;
  g_by_shape = on && by_shape;
}
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
  // The op last: keys split by shape are long.
  std::string out = "   calls      seconds   share    us/call  op\n";
  char line[96];
  auto share = [&](double s) { return total_seconds > 0 ? 100.0 * s / total_seconds : 0.0; };
  for (const auto& [key, t] : rows) {
    std::snprintf(line, sizeof line, "%8lld %12.3f %6.1f%% %10.1f  ", (long long)t.calls, t.seconds, share(t.seconds),
                  1e6 * t.seconds / double(std::max<int64_t>(1, t.calls)));
    out += line + key + "\n";
  }
  const double overhead = std::max(0.0, total_seconds - ops);
  std::snprintf(line, sizeof line, "%8s %12.3f %6.1f%% %10s  ", "", overhead, share(overhead), "");
  out += line + std::string("framework overhead (autograd, allocation, data, host code)\n");
  std::snprintf(line, sizeof line, "%8s %12.3f %7s %10s  total\n", "", total_seconds, "", "");
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
