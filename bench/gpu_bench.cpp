// bench_gpu: the numbers the CUDA issue asks for, one JSON line per result.
//
//   bench_gpu matmul  --n 8192 --dtype bf16        TFLOP/s of kiln::matmul
//   bench_gpu copy    --mib 1024                   device-to-device copy GB/s
//   bench_gpu gpt     --batch 8 --precision bf16   GPT-2 124M training tokens/s and MFU
//                     [--profile]                  ... and the time per op (stderr; each op synchronised)
//                     [--profile-shapes]           ... split by operand shapes
//   bench_gpu attention --T 1024 --D 64            causal attention forward+backward TFLOP/s
//   bench_gpu compare                              the same work on the CPU and the GPU
//   bench_gpu allreduce --mib 256                  one rank's all-reduce (NCCL on a GPU), bus GB/s
//
// Everything runs through Kiln's public API (no CUDA headers): time is taken
// on the host around a backend synchronize(), after warm-up iterations.
// `--device cpu` runs the same code on the CPU (how it is checked in CI).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

#include "kiln/amp/autocast.h"
#include "kiln/backend/profiler.h"
#include "kiln/cpu/runtime_defaults.h"
#include "kiln/distributed/nccl_transport.h"
#include "kiln/optim/optimizer.h"
#include "models/gpt/gpt.h"
#include "models/vision/classifiers.h"

using namespace kiln;

namespace {

// Dense bf16 tensor-core peak of the chip, for MFU (H100/H200 SXM: 989 TFLOP/s).
double dense_bf16_peak_tflops(Device d) { return d.is_cuda() ? 989.0 : 0.0; }

void sync(Device d) { backend_for(d).synchronize(d.index); }

// Median-free simple timing: warm-up, then the mean over `iters`.
double seconds_per_iter(Device d, int warmup, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  sync(d);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  sync(d);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

Tensor random_on(const Shape& s, DType dt, Device d, uint64_t seed) {
  Generator g(seed);
  Tensor t = Tensor::empty(s, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = g.uniform() - 0.5f;
  return copy_to(t, d, dt);
}

double matmul_seconds(int64_t n, DType dt, Device d, int iters) {
  NoGradGuard ng;
  Tensor a = random_on({n, n}, dt, d, 1), b = random_on({n, n}, dt, d, 2);
  return seconds_per_iter(d, 2, iters, [&] { matmul(a, b); });
}

struct StepTiming {
  double seconds_per_step;
  int64_t params;
};

StepTiming gpt_step_seconds(const models::GptConfig& c, int64_t batch, const std::string& precision, Device d,
                            int steps, bool profile = false, bool by_shape = false) {
  Generator init(0);
  models::Gpt model(c, init, std::make_shared<Generator>(1));
  model.to(d);
  optim::AdamWOptions ao;
  ao.decay_matrices_only = true;
  optim::AdamW opt(model.named_parameters(), 3e-4, ao);
  Generator g(3);
  std::vector<int64_t> ids(size_t(batch * c.block_size));
  for (auto& v : ids) v = int64_t(g.below(uint64_t(c.vocab_size)));
  Tensor x = Tensor::from_vector(ids, {batch, c.block_size}).to(d);
  Tensor y = x;  // targets: any valid ids will do for timing
  DType autocast = precision == "bf16" ? DType::bf16 : precision == "fp16" ? DType::f16 : DType::f32;
  auto step = [&] {
    Tensor loss;
    {
      amp::AutocastGuard guard(autocast);  // f32 turns autocast off
      loss = model.loss(x, y);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  const StepTiming timing{seconds_per_iter(d, 2, steps, step), model.parameter_count()};
  if (profile) {  // separate steps, so that the synchronising profiler does not slow the timed ones
    Profiler::enable(true, by_shape);
    const double profiled = seconds_per_iter(d, 0, steps, step) * steps;
    Profiler::enable(false);
    std::fputs(Profiler::report(profiled).c_str(), stderr);
  }
  return timing;
}

// Causal attention forward + backward through the backend, as training runs
// it, over B*T = 16,384 tokens and H*D = 2,048 (FlashAttention's benchmark
// shapes). FLOPs as FlashAttention counts them: the forward's two products,
// 4 B H T^2 D, halved for causality; the backward's five, 2.5 times that.
struct AttentionTiming {
  double seconds, tflops, forward_seconds;
};

AttentionTiming attention_fwd_bwd(int64_t T, int64_t D, DType dt, Device d, int iters) {
  const int64_t B = std::max<int64_t>(1, 16384 / T), H = 2048 / D;
  const Shape shape = {B, H, T, D};
  Tensor q = random_on(shape, dt, d, 11), k = random_on(shape, dt, d, 12), v = random_on(shape, dt, d, 13);
  Tensor dout = random_on(shape, dt, d, 14);
  Tensor out = Tensor::empty(shape, dt, d), lse = Tensor::empty({B, H, T}, DType::f32, d);
  Tensor dq = Tensor::empty(shape, dt, d), dk = Tensor::empty(shape, dt, d), dv = Tensor::empty(shape, dt, d);
  Backend& be = backend_for(d);
  const float scale = 1.0f / std::sqrt(float(D));
  const double s = seconds_per_iter(d, 2, iters, [&] {
    be.attention(q, k, v, out, lse, scale, true);
    be.attention_backward(dout, q, k, v, out, lse, dq, dk, dv, scale, true);
  });
  const double forward = seconds_per_iter(d, 2, iters, [&] { be.attention(q, k, v, out, lse, scale, true); });
  const double forward_flops = 4.0 * double(B * H) * double(T) * double(T) * double(D) / 2;
  return {s, 3.5 * forward_flops / s / 1e12, forward};
}

double cnn_step_seconds(int64_t batch, Device d, int steps) {
  Generator init(0);
  auto model = models::make_cnn(init, std::make_shared<Generator>(1));
  model->to(d);
  optim::AdamW opt(model->named_parameters(), 1e-3);
  Tensor x = random_on({batch, 1, 28, 28}, DType::f32, d, 4);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[size_t(i)] = i % 10;
  Tensor y = Tensor::from_vector(labels, {batch}).to(d);
  return seconds_per_iter(d, 2, steps, [&] {
    Tensor loss = cross_entropy(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  });
}

double cnn_inference_seconds(int64_t batch, Device d, int iters) {
  Generator init(0);
  auto model = models::make_cnn(init, std::make_shared<Generator>(1));
  model->to(d);
  model->eval();
  NoGradGuard ng;
  Tensor x = random_on({batch, 1, 28, 28}, DType::f32, d, 5);
  return seconds_per_iter(d, 2, iters, [&] { argmax(model->forward(x), 1); });
}

}  // namespace

int main(int argc, char** argv) {
  apply_runtime_defaults(argv);
  CLI::App app{"Kiln GPU benchmarks"};
  app.require_subcommand(1);
  std::string device = "cuda", dtype = "bf16", precision = "bf16";
  int64_t n = 8192, mib = 1024, batch = 8, layers = 12, width = 768, heads = 12, block = 1024;
  int iters = 10, threads = 0;
  bool profile = false, profile_shapes = false;
  for (CLI::App* sub : {app.add_subcommand("matmul", "matrix product throughput"),
                        app.add_subcommand("copy", "device-to-device copy bandwidth"),
                        app.add_subcommand("gpt", "GPT training throughput and MFU"),
                        app.add_subcommand("attention", "causal attention forward+backward throughput"),
                        app.add_subcommand("compare", "the same work on CPU and GPU"),
                        app.add_subcommand("allreduce", "one rank's all-reduce through the communicator")}) {
    sub->add_option("--device", device);
    sub->add_option("--iters", iters);
    sub->add_option("--threads", threads, "CPU threads (0: all)");
  }
  app.get_subcommand("matmul")->add_option("--n", n);
  app.get_subcommand("matmul")->add_option("--dtype", dtype);
  app.get_subcommand("copy")->add_option("--mib", mib);
  app.get_subcommand("allreduce")->add_option("--mib", mib);
  auto* gpt = app.get_subcommand("gpt");
  gpt->add_option("--batch", batch);
  gpt->add_option("--precision", precision);
  gpt->add_option("--layers", layers);
  gpt->add_option("--width", width);
  gpt->add_option("--heads", heads);
  gpt->add_option("--block", block);
  gpt->add_flag("--profile", profile, "also print each op's time (stderr)");
  gpt->add_flag("--profile-shapes", profile_shapes, "also print each op's time by operand shapes (stderr)");
  int64_t attention_d = 64;
  app.get_subcommand("attention")->add_option("--T", block, "sequence length");
  app.get_subcommand("attention")->add_option("--D", attention_d, "head dim");
  app.get_subcommand("attention")->add_option("--dtype", dtype);
  auto* compare = app.get_subcommand("compare");
  compare->add_option("--n", n, "matrix size for the matmul row")->default_val(10000);
  CLI11_PARSE(app, argc, argv);

  try {
    set_num_threads(threads);
    Device d = Device::parse(device);
    if (d.is_cuda() && !cuda_is_available()) {
      std::fprintf(stderr, "bench_gpu: no GPU here (%s); use --device cpu to check the code path\n",
                   cuda_unavailable_reason().c_str());
      return 2;
    }
    if (*app.get_subcommand("matmul")) {
      DType dt = dtype_parse(dtype);
      double s = matmul_seconds(n, dt, d, iters);
      std::printf("{\"bench\":\"matmul\",\"impl\":\"kiln\",\"device\":\"%s\",\"n\":%lld,\"dtype\":\"%s\","
                  "\"ms\":%.4f,\"tflops\":%.2f}\n",
                  d.str().c_str(), (long long)n, dtype_name(dt), s * 1e3, 2.0 * double(n) * n * n / s / 1e12);
    } else if (*app.get_subcommand("attention")) {
      const AttentionTiming t = attention_fwd_bwd(block, attention_d, dtype_parse(dtype), d, iters);
      std::printf("{\"bench\":\"attention\",\"impl\":\"kiln\",\"device\":\"%s\",\"T\":%lld,\"D\":%lld,"
                  "\"dtype\":\"%s\",\"ms\":%.4f,\"tflops\":%.2f,\"forward_ms\":%.4f}\n",
                  d.str().c_str(), (long long)block, (long long)attention_d, dtype.c_str(), t.seconds * 1e3, t.tflops,
                  t.forward_seconds * 1e3);
    } else if (*app.get_subcommand("copy")) {
      const int64_t elems = mib * (1 << 20) / 4;
      Tensor src = random_on({elems}, DType::f32, d, 6), dst = Tensor::empty({elems}, DType::f32, d);
      double s = seconds_per_iter(d, 2, iters, [&] { copy_into(src, dst); });
      // Bytes read plus bytes written, the convention of bandwidth tests.
      std::printf("{\"bench\":\"copy\",\"impl\":\"kiln\",\"device\":\"%s\",\"mib\":%lld,\"gbs\":%.1f}\n",
                  d.str().c_str(), (long long)mib, 2.0 * double(elems) * 4 / s / 1e9);
    } else if (*app.get_subcommand("allreduce")) {
      // A world of one over NCCL: the launch, stream ordering and completion
      // wait that every data-parallel step pays, without the network.
      auto comm = distributed::with_nccl(distributed::make_single_communicator());
      const int64_t elems = mib * (1 << 20) / 4;
      Tensor t = random_on({elems}, DType::f32, d, 7);
      double s = seconds_per_iter(d, 2, iters, [&] { comm->all_reduce(t, distributed::Reduce::sum); });
      std::printf("{\"bench\":\"allreduce\",\"impl\":\"kiln\",\"transport\":\"%s\",\"device\":\"%s\","
                  "\"mib\":%lld,\"ms\":%.4f,\"algo_gbs\":%.1f}\n",
                  comm->transport().c_str(), d.str().c_str(), (long long)mib, s * 1e3, double(elems) * 4 / s / 1e9);
    } else if (*gpt) {
      models::GptConfig c;
      c.vocab_size = 50304;  // GPT-2's 50257 padded to a multiple of 128, as llm.c and nanoGPT do
      c.n_layer = layers, c.n_embd = width, c.n_head = heads, c.block_size = block;
      StepTiming t = gpt_step_seconds(c, batch, precision, d, iters, profile || profile_shapes, profile_shapes);
      double tok_s = double(batch * block) / t.seconds_per_step;
      double peak = dense_bf16_peak_tflops(d);
      std::printf("{\"bench\":\"gpt\",\"impl\":\"kiln\",\"device\":\"%s\",\"params\":%lld,\"batch\":%lld,"
                  "\"block\":%lld,\"precision\":\"%s\",\"tokens_per_s\":%.0f,\"mfu\":%.4f}\n",
                  d.str().c_str(), (long long)t.params, (long long)batch, (long long)block, precision.c_str(),
                  tok_s, peak > 0 ? 6.0 * double(t.params) * tok_s / (peak * 1e12) : 0.0);
    } else if (*compare) {
      // Each row: the same work on the CPU (all cores) and on `device`.
      Device cpu = Device::cpu();
      auto row = [&](const char* what, double cpu_s, double dev_s) {
        std::printf("{\"bench\":\"compare\",\"impl\":\"kiln\",\"work\":\"%s\",\"device\":\"%s\",\"cpu_ms\":%.3f,\"device_ms\":%.3f,"
                    "\"speedup\":%.1f}\n",
                    what, d.str().c_str(), cpu_s * 1e3, dev_s * 1e3, cpu_s / dev_s);
        std::fflush(stdout);
      };
      // The names of the rows are shared with torch_gpu_bench.py's compare.
      row("matmul f32 (tf32 on GPU)", matmul_seconds(n, DType::f32, cpu, 1), matmul_seconds(n, DType::f32, d, 5));
      row("matmul bf16", matmul_seconds(n, DType::bf16, cpu, 1), matmul_seconds(n, DType::bf16, d, 5));
      models::GptConfig c;
      c.vocab_size = 2048, c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.block_size = 128;
      row("GPT training step (fortunes-gpt model, batch 16, fp32)",
          gpt_step_seconds(c, 16, "fp32", cpu, 3).seconds_per_step, gpt_step_seconds(c, 16, "fp32", d, 10).seconds_per_step);
      row("CNN training step (batch 128)", cnn_step_seconds(128, cpu, 3), cnn_step_seconds(128, d, 10));
      row("CNN batched inference (batch 1024)", cnn_inference_seconds(1024, cpu, 3), cnn_inference_seconds(1024, d, 10));
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gpu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
