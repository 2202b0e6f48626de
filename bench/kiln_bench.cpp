// kiln_bench: CPU training throughput of Kiln's MLP, CNN and GPT, and Kiln's
// matrix product against a direct cblas_sgemm call. bench/torch_bench.py runs
// the same models in PyTorch with the same flags and prints the same JSON, so
// bench/run_cpu_bench.sh can put the two side by side.
//
// Inputs are random tensors made once before timing: the benchmark measures
// compute (forward, cross-entropy, backward, AdamW step), not data loading.
//
//   kiln_bench --model mlp|cnn|gpt|matmul --threads N --steps S --warmup W --batch B
//
// Prints one JSON line.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/amp/autocast.h"
#include "kiln/autograd/ops.h"
#include "kiln/backend/backend.h"
#include "kiln/cpu/isa.h"
#include "kiln/cpu/runtime_defaults.h"
#include "kiln/nn/init.h"
#include "kiln/optim/optimizer.h"
#include "models/gpt/gpt.h"
#include "models/vision/classifiers.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "mlp";
  int threads = 1;
  int64_t steps = 20, warmup = 3, batch = 0;  // batch 0: the model's default
  std::string precision = "fp32";              // or bf16: the forward under bf16 autocast, as kiln train's
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    KILN_CHECK(i + 1 < argc, "kiln_bench: ", flag, " needs a value");
    std::string value = argv[++i];
    if (flag == "--model") o.model = value;
    else if (flag == "--threads") o.threads = std::stoi(value);
    else if (flag == "--steps") o.steps = std::stoll(value);
    else if (flag == "--warmup") o.warmup = std::stoll(value);
    else if (flag == "--batch") o.batch = std::stoll(value);
    else if (flag == "--precision") o.precision = value;
    else KILN_FAIL("kiln_bench: unknown flag ", flag, " (use --model --threads --steps --warmup --batch --precision)");
  }
  KILN_CHECK(o.threads > 0 && o.steps > 0 && o.warmup >= 0 && o.batch >= 0,
             "kiln_bench: --threads and --steps must be positive, --warmup and --batch non-negative");
  KILN_CHECK(o.precision == "fp32" || o.precision == "bf16", "kiln_bench: --precision is fp32 or bf16, got ",
             o.precision);
  return o;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

kiln::Tensor random_ids(const kiln::Shape& shape, int64_t vocab, kiln::Generator& gen) {
  std::vector<int64_t> v(size_t(kiln::shape_numel(shape)));
  for (auto& x : v) x = int64_t(gen.below(uint64_t(vocab)));
  return kiln::Tensor::from_vector(v, shape);
}

// Runs warmup + steps training steps of `loss_fn` and returns steps per second.
double time_training(const Options& o, kiln::nn::Module& model, const std::function<kiln::Tensor()>& loss_fn) {
  kiln::optim::AdamW opt(model.named_parameters(), 1e-3);
  const kiln::DType autocast = o.precision == "bf16" ? kiln::DType::bf16 : kiln::DType::f32;
  auto step = [&] {
    kiln::Tensor loss;
    {
      kiln::amp::AutocastGuard guard(autocast);
      loss = loss_fn();
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss.item();
  };
  for (int64_t i = 0; i < o.warmup; ++i) step();
  auto t0 = Clock::now();
  double last = 0;
  for (int64_t i = 0; i < o.steps; ++i) last = step();
  double s = seconds_since(t0);
  KILN_CHECK(std::isfinite(last), "kiln_bench: loss is not finite (", last, ")");
  return double(o.steps) / s;
}

// The matrix products of one MLP training step: forward, and backward's
// weight and input gradients (2 B in out FLOPs each), less the first
// layer's input gradient, which nothing needs.
double mlp_step_flop(const kiln::nn::Module& mlp, int64_t batch) {
  double total = 0, first = 0;
  for (const kiln::Tensor& w : mlp.parameters()) {
    if (w.dim() != 2) continue;
    const double mac = double(w.size(0)) * double(w.size(1)) * double(batch);
    if (first == 0) first = mac;
    total += 6 * mac;
  }
  return total - 2 * first;
}

nlohmann::json bench_model(const Options& o) {
  kiln::Generator init(1234), data(99);
  auto dropout_gen = std::make_shared<kiln::Generator>(7);
  nlohmann::json j = {{"engine", "kiln"}, {"model", o.model}, {"threads", o.threads}, {"steps", o.steps},
                      {"warmup", o.warmup}, {"precision", o.precision},
                      {"isa", kiln::cpu::isa_name(kiln::cpu::max_isa())}};
  if (o.model == "mlp" || o.model == "cnn") {
    const int64_t B = o.batch > 0 ? o.batch : 128;
    auto model = o.model == "mlp" ? kiln::models::make_mlp(init) : kiln::models::make_cnn(init, dropout_gen);
    kiln::Tensor x = kiln::nn::uniform_tensor({B, 1, 28, 28}, 1.0, data);
    kiln::Tensor y = random_ids({B}, 10, data);
    double sps = time_training(o, *model, [&] { return kiln::cross_entropy(model->forward(x), y); });
    j.update({{"batch", B}, {"params", model->parameter_count()}, {"unit", "images/s"}, {"items_per_s", sps * double(B)}, {"step_ms", 1e3 / sps}});
    if (o.model == "mlp") j["gflops"] = mlp_step_flop(*model, B) * sps * 1e-9;  // against the GEMM peak (roofline)
    return j;
  }
  KILN_CHECK(o.model == "gpt", "kiln_bench: unknown --model ", o.model, " (mlp, cnn, gpt or matmul)");
  kiln::models::GptConfig c;
  c.vocab_size = 2048;
  c.block_size = 128;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 128;
  c.dropout = 0.0;
  const int64_t B = o.batch > 0 ? o.batch : 16, T = c.block_size;
  kiln::models::Gpt model(c, init, dropout_gen);
  kiln::Tensor ids = random_ids({B, T}, c.vocab_size, data);
  kiln::Tensor targets = random_ids({B, T}, c.vocab_size, data);
  double sps = time_training(o, model, [&] { return model.loss(ids, targets); });
  j.update({{"batch", B}, {"params", model.parameter_count()}, {"unit", "tokens/s"}, {"items_per_s", sps * double(B * T)}, {"step_ms", 1e3 / sps}});
  return j;
}

// ---- matmul: kiln::matmul against cblas_sgemm on the same buffers.

struct GemmShape {
  const char* label;
  int64_t M, N, K;
  bool ta, tb;  // operand stored transposed, as the models' GEMMs see them
};

// The models' GEMMs at their default batch sizes (MLP 128 images, GPT 16x128
// tokens, C = 128), forward and the weight-gradient products, plus two big
// squares where BLAS should be at its peak.
const std::vector<GemmShape> kShapes = {
    {"mlp fc1 fwd", 128, 512, 784, false, true},    {"mlp fc1 dW", 512, 784, 128, true, false},
    {"mlp fc2 fwd", 128, 256, 512, false, true},    {"mlp fc3 fwd", 128, 10, 256, false, true},
    {"gpt c_attn fwd", 2048, 384, 128, false, true}, {"gpt mlp c_fc fwd", 2048, 512, 128, false, true},
    {"gpt mlp c_proj fwd", 2048, 128, 512, false, true}, {"gpt lm_head fwd", 2048, 2048, 128, false, true},
    {"gpt lm_head dX", 2048, 128, 2048, false, false},   {"gpt lm_head dW", 2048, 128, 2048, true, false},
    {"square 1024", 1024, 1024, 1024, false, false},     {"square 2048", 2048, 2048, 2048, false, false},
};

// Seconds per call of fn: repeats until at least `min_s` has passed.
double time_per_call(const std::function<void()>& fn, double min_s) {
  int64_t reps = 0;
  auto t0 = Clock::now();
  do {
    fn();
    ++reps;
  } while (seconds_since(t0) < min_s);
  return seconds_since(t0) / double(reps);
}

nlohmann::json bench_matmul(const Options& o) {
  kiln::NoGradGuard ng;
  kiln::Generator gen(5);
  nlohmann::json rows = nlohmann::json::array();
  const int rounds = 5;
  for (const GemmShape& s : kShapes) {
    // Stored layouts: A is [M, K] or, when ta, [K, M]; likewise B.
    kiln::Tensor a_store = kiln::nn::uniform_tensor(s.ta ? kiln::Shape{s.K, s.M} : kiln::Shape{s.M, s.K}, 1.0, gen);
    kiln::Tensor b_store = kiln::nn::uniform_tensor(s.tb ? kiln::Shape{s.N, s.K} : kiln::Shape{s.K, s.N}, 1.0, gen);
    kiln::Tensor a = s.ta ? kiln::transpose(a_store, 0, 1) : a_store;
    kiln::Tensor b = s.tb ? kiln::transpose(b_store, 0, 1) : b_store;
    kiln::Tensor c_blas = kiln::Tensor::empty({s.M, s.N}), c_kiln;
    const float* ap = a_store.data<float>();
    const float* bp = b_store.data<float>();
    float* cp = c_blas.data<float>();
    auto run_kiln = [&] { c_kiln = kiln::matmul(a, b); };
    // The backend op alone, into a preallocated output: separates the cost of
    // allocating (and page-faulting) a fresh output from the GEMM call itself.
    kiln::Tensor c_pre = kiln::Tensor::empty({s.M, s.N});
    kiln::Backend& backend = kiln::backend_for(a);
    auto run_backend = [&] { backend.matmul(a, b, c_pre, kiln::MatmulArgs{}); };
    auto run_blas = [&] {
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, int(s.M),
                  int(s.N), int(s.K), 1.0f, ap, int(s.ta ? s.M : s.K), bp, int(s.tb ? s.K : s.N), 0.0f, cp,
                  int(s.N));
    };
    // Same answer first: a benchmark of a wrong product is worthless.
    run_blas();
    std::vector<float> ref(cp, cp + s.M * s.N);
    run_kiln();
    const float* kp = c_kiln.data<float>();
    // Relative to the output's magnitude: fp32 sums of K products in another
    // order differ by a few ulps of the largest value per sqrt(K) terms, far
    // below 1e-5 of it; an absolute 1e-3 * K (2.0 at K = 2048) let wrong
    // products through. A NaN anywhere fails.
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      KILN_CHECK(!std::isnan(kp[i]), "kiln_bench: kiln::matmul gave NaN on ", s.label, " at ", i);
      max_err = std::max(max_err, double(std::abs(kp[i] - ref[i])));
      max_ref = std::max(max_ref, double(std::abs(ref[i])));
    }
    KILN_CHECK(max_err <= 1e-5 * max_ref, "kiln_bench: kiln::matmul differs from cblas_sgemm on ", s.label, " by ",
               max_err, " (largest |value| ", max_ref, ")");
    // Interleave the three, several rounds, and keep each one's best round:
    // the least-disturbed measurement on a shared machine.
    double t_kiln = 1e30, t_blas = 1e30, t_backend = 1e30;
    for (int r = 0; r < rounds; ++r) {
      t_blas = std::min(t_blas, time_per_call(run_blas, 0.1));
      t_kiln = std::min(t_kiln, time_per_call(run_kiln, 0.1));
      t_backend = std::min(t_backend, time_per_call(run_backend, 0.1));
    }
    const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
    rows.push_back({{"shape", s.label},
                    {"M", s.M},
                    {"N", s.N},
                    {"K", s.K},
                    {"transA", s.ta},
                    {"transB", s.tb},
                    {"kiln_gflops", flop / t_kiln * 1e-9},
                    {"openblas_gflops", flop / t_blas * 1e-9},
                    {"kiln_backend_gflops", flop / t_backend * 1e-9},
                    {"ratio", t_blas / t_kiln}});
  }
  return {{"engine", "kiln"}, {"model", "matmul"}, {"threads", o.threads}, {"rounds", rounds}, {"results", rows}};
}

}  // namespace

int main(int argc, char** argv) {
  kiln::apply_runtime_defaults(argv);
  try {
    Options o = parse(argc, argv);
    kiln::set_num_threads(o.threads);
    nlohmann::json j = o.model == "matmul" ? bench_matmul(o) : bench_model(o);
    std::printf("%s\n", j.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_bench: %s\n", e.what());
    return 1;
  }
}
