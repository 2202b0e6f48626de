// Kiln's side of bench/hf/run.sh: on a Hugging Face folder, the load time
// (and the time to a first token's logits, which reads the mapped weights),
// prompt processing (one forward pass over P tokens into the cache) and
// single-stream greedy decoding (N tokens, one at a time), best of R runs,
// in f32, bf16, or quantized (int8, int4, int4z: the f32 weights quantized
// as --quantize does, which the load time includes), or a GGUF file's
// weights as they are ("gguf": Q8_0, Q4_0, the K-quants kept quantized). Prints one JSON line,
// with the bytes of weights and of keys and values a decoding step reads,
// and the memory read bandwidth measured at the same thread count.
// KILN_HF_BENCH_PROFILE=1 also prints to stderr where the last run's prompt
// pass and decoding steps spent their time, by backend op (kiln/backend/profiler.h); =shapes
// splits each op by its operands' shapes and dtypes.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/hf/read_bandwidth.h"
#include "kiln/backend/profiler.h"
#include "kiln/cpu/runtime_defaults.h"
#include "kiln/nn/layers.h"
#include "models/hf/hf_model.h"

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int main(int argc, char** argv) {
  kiln::apply_runtime_defaults(argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [prompt_tokens=128] [new_tokens=64] [repeats=3] [f32|bf16|int8|int4|int4z|gguf]\n",
                 argv[0]);
    return 2;
  }
  const int64_t P = argc > 2 ? std::atoll(argv[2]) : 128, N = argc > 3 ? std::atoll(argv[3]) : 64;
  const int R = argc > 4 ? std::atoi(argv[4]) : 3;
  auto t0 = Clock::now();
  const std::string dtype = argc > 5 ? argv[5] : "f32";
  // "gguf": a GGUF file's weights as they are (its quantized types kept quantized).
  auto lm = kiln::models::load_hf_causal_lm(
      argv[1], dtype == "gguf" ? std::nullopt : std::optional(dtype == "bf16" ? kiln::DType::bf16 : kiln::DType::f32));
  size_t weight_bytes = 0;
  if (dtype != "f32" && dtype != "bf16" && dtype != "gguf")
    kiln::nn::quantize_weights(*lm.model, kiln::parse_quant_format(dtype));
  for (const auto& p : lm.model->parameters()) weight_bytes += p.nbytes();
  lm.model->for_each_module([&](const std::string&, kiln::nn::Module& m) {
    if (auto* w = dynamic_cast<kiln::nn::WeightModule*>(&m); w && w->quantized) weight_bytes += w->quantized->bytes();
  });
  // What a decoding step reads: a mixture of experts, its routed experts
  // alone (experts_per_token / experts of their bytes); an untied input
  // embedding, one row (the head reads a tied one whole).
  const auto& config = lm.config;
  double expert_bytes = 0, untied_embedding_bytes = 0;
  lm.model->for_each_module([&](const std::string& name, kiln::nn::Module& m) {  // (name: "model.embed_tokens.")
    auto* w = dynamic_cast<kiln::nn::WeightModule*>(&m);
    const double bytes = w ? double(w->quantized ? w->quantized->bytes() : w->weight.nbytes()) : 0;
    if (name.find(".experts.") != std::string::npos) expert_bytes += bytes;
    if (name.ends_with("embed_tokens.") && !config.value("tie_word_embeddings", false)) untied_embedding_bytes += bytes;
  });
  const double experts = double(config.value("num_local_experts", config.value("num_experts", int64_t(1))));
  const double routed = double(config.value("num_experts_per_tok", int64_t(1)));
  const double read_bytes = double(weight_bytes) - expert_bytes * (1 - routed / experts) - untied_embedding_bytes;
  const double load_s = seconds_since(t0);
  {  // mapped weights are read when first used: time to the first token's logits too
    kiln::NoGradGuard ng;
    auto cache = lm.model->new_cache();
    lm.model->forward_cached(kiln::Tensor::from_vector(std::vector<int64_t>{5}, {1, 1}), cache);
  }
  const double first_logits_s = seconds_since(t0);
  std::vector<int64_t> prompt(static_cast<size_t>(P), 0);
  for (int64_t i = 0; i < P; ++i) prompt[size_t(i)] = 3 + (i * 7919) % 600;  // ids the fixture tokenizer makes
  kiln::NoGradGuard ng;
  double best_prefill = 1e30, best_decode = 1e30;
  const char* profile_env = std::getenv("KILN_HF_BENCH_PROFILE");
  const bool profile = profile_env != nullptr;
  for (int r = 0; r < R; ++r) {
    // A prompt of its own each time: an earlier one's pages would be taken from the prefix cache.
    prompt[0] = 3 + r;
    auto cache = lm.model->new_cache();
    const bool profiled = profile && r == R - 1;
    auto profile_from = [&] {
      kiln::Profiler::reset();
      kiln::Profiler::enable(true, std::string(profile_env) == "shapes");
    };
    auto profile_to = [&](const char* what, double seconds) {
      kiln::Profiler::enable(false);
      std::fprintf(stderr, "%s:\n%s", what, kiln::Profiler::report(seconds).c_str());
    };
    if (profiled) profile_from();
    auto t = Clock::now();
    kiln::Tensor logits = lm.model->forward_cached(kiln::Tensor::from_vector(prompt, {1, P}), cache);
    const double prefill = seconds_since(t);
    if (profiled) profile_to("prompt", prefill);
    auto first = logits.to_vector<float>();
    int32_t next = int32_t(std::max_element(first.begin(), first.end()) - first.begin());
    if (profiled) profile_from();
    t = Clock::now();
    for (int64_t i = 0; i < N; ++i) {
      logits = lm.model->forward_cached(kiln::Tensor::from_vector(std::vector<int64_t>{next}, {1, 1}), cache);
      const auto row = logits.to_vector<float>();
      next = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    }
    const double decode = seconds_since(t);
    if (profiled) profile_to("decoding", decode);
    best_prefill = std::min(best_prefill, prefill);
    best_decode = std::min(best_decode, decode);
  }
  // The keys and values a decoding step reads, at its average position.
  const auto& c = lm.config;
  const int64_t layers = c.value("num_hidden_layers", int64_t(0)), heads = c.value("num_attention_heads", int64_t(1));
  const int64_t kv_heads = c.value("num_key_value_heads", heads);
  const int64_t head_dim = c.contains("head_dim") && c["head_dim"].is_number_integer()
                               ? c["head_dim"].get<int64_t>()
                               : c.value("hidden_size", int64_t(0)) / heads;  // (Mixtral's is null)
  const double kv_bytes = double(layers * 2 * kv_heads * head_dim) * (double(P) + double(N) / 2) *
                          (dtype == "bf16" ? 2.0 : 4.0);
  std::printf("%s\n", nlohmann::json{{"engine", "kiln"},
                                     {"load_s", load_s},
                                     {"first_logits_s", first_logits_s},
                                     {"prefill_tokens_per_s", double(P) / best_prefill},
                                     {"decode_tokens_per_s", double(N) / best_decode},
                                     {"weight_bytes", read_bytes},
                                     {"kv_bytes_per_token", kv_bytes},
                                     {"read_gbps", read_bandwidth_gbps()}}
                          .dump()
                          .c_str());
  return 0;
}
