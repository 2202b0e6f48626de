// A decoding step, once warm, takes nothing from the heap: tensor heads and
// storage records come from per-thread free lists (kiln/core/pooled.h),
// shapes and strides live inline (kiln/core/shape.h), op outputs and staged
// copies from the CPU allocator's cache, parallel loops take their bodies by
// reference, inference records no backward rule, and the step's bookkeeping
// (positions, page tables, rotary rows) is written into tensors. Counted
// over every format a step multiplies in (f32, bf16, Kiln's int8 and int4,
// GGUF's Q8_0, Q4_0 and K-quants), for one sequence (forward_cached, as kiln
// sample and kiln_hf_bench decode) and for a batch (forward_decode, as kiln
// serve's scheduler does), and for a Llama and a GPT built from configs at
// two depths. (A step that fills a page publishes it for prefix sharing: one
// index entry each page_size tokens. The steps counted here stay in a page.)
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/core/quantized.h"
#include "kiln/nn/layers.h"
#include "models/hf/hf_model.h"
#include "models/gpt/gpt.h"
#include "models/llama/llama.h"
#include "tests/alloc/counting.h"

namespace kiln {
namespace {

std::string fixture(const std::string& name) { return std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/" + name; }

struct Model {
  const char* name;
  std::string path;
  std::optional<DType> dtype;
  const char* quantize = nullptr;  // Kiln's own quantized formats
};

std::vector<Model> models_to_decode() {
  return {
      {"f32", fixture("llama-gqa"), DType::f32},
      {"bf16", fixture("llama-gqa"), DType::bf16},
      {"int8", fixture("llama-gqa"), DType::f32, "int8"},
      {"int4", fixture("llama-gqa"), DType::f32, "int4"},
      {"gguf Q8_0", fixture("gguf-tiny/model-q8_0.gguf"), std::nullopt},
      {"gguf Q4_0", fixture("gguf-tiny/model-q4_0.gguf"), std::nullopt},
      {"gguf Q4_K_M", fixture("gguf-tiny/model-q4_k_m.gguf"), std::nullopt},
      // Families with more in a step: biases, q/k norms, soft caps and sliding layers, local rotary tables,
      // LongRoPE, and mixtures of experts (routing lists a layer; renormalised top k or not).
      {"qwen2 (biases)", fixture("qwen2"), DType::f32},
      {"qwen3", fixture("qwen3"), DType::f32},
      {"gemma2", fixture("gemma2"), DType::f32},
      {"gemma3", fixture("gemma3"), DType::f32},
      {"phi3 (longrope)", fixture("rope-longrope"), DType::f32},
      {"mixtral", fixture("mixtral"), DType::f32},
      {"qwen3-moe", fixture("qwen3-moe"), DType::f32},
      {"olmoe", fixture("olmoe"), DType::f32},
  };
}

// The largest logit of `row` (f32 or bf16, read in place: the test's own code allocates nothing).
int32_t greedy(const Tensor& logits, int64_t row) {
  const int64_t V = logits.size(-1);
  auto value = [&](int64_t i) {
    if (logits.dtype() == DType::f32) return logits.data<float>()[row * V + i];
    const uint32_t bits = uint32_t(static_cast<const uint16_t*>(logits.data_ptr())[row * V + i]) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  };
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (value(i) > value(best)) best = i;
  return int32_t(best);
}

// The heap allocations of 6 warm steps, one sequence (forward_cached), then of 6 for two (forward_decode).
std::pair<int64_t, int64_t> allocations_per_step(models::LanguageModel& model) {
  NoGradGuard no_grad;
  models::KvCache cache = model.new_cache();
  Tensor logits = model.forward_cached(Tensor::from_vector(std::vector<int64_t>{1, 17, 250, 3, 99}, {1, 5}), cache);
  Tensor ids = Tensor::empty({1, 1}, DType::i64);
  auto step = [&] {
    ids.data<int64_t>()[0] = greedy(logits, 0);
    logits = model.forward_cached(ids, cache);
  };
  for (int i = 0; i < 3; ++i) step();  // warm: the free lists and the allocator's cache fill
  const int64_t alone = kiln_test::allocations_during([&] {
    for (int i = 0; i < 6; ++i) step();
  });
  models::KvCache a = model.new_cache(), b = model.new_cache();
  const std::vector<models::KvCache*> caches = {&a, &b};
  logits = model.forward_prompts({{1, 17, 250}, {3, 99, 5, 8}}, caches);
  std::vector<int32_t> tokens(2);
  auto batch_step = [&] {
    for (int64_t r = 0; r < 2; ++r) tokens[size_t(r)] = greedy(logits, r);
    logits = model.forward_decode(tokens, caches);
  };
  for (int i = 0; i < 3; ++i) batch_step();
  const int64_t batched = kiln_test::allocations_during([&] {
    for (int i = 0; i < 6; ++i) batch_step();
  });
  return {alone, batched};
}

TEST(DecodeAllocations, AWarmStepTakesNothingFromTheHeapInAnyFormat) {
  for (const Model& m : models_to_decode()) {
    SCOPED_TRACE(m.name);
    auto lm = models::load_hf_causal_lm(m.path, m.dtype);
    if (m.quantize) nn::quantize_weights(*lm.model, parse_quant_format(m.quantize));
    EXPECT_EQ(allocations_per_step(*lm.model), std::make_pair(int64_t(0), int64_t(0)));
  }
}

TEST(DecodeAllocations, NoStepTakesFromTheHeapWhateverTheDepth) {
  for (int64_t layers : {1, 8}) {
    models::LlamaConfig c;
    c.vocab_size = 300, c.hidden_size = 32, c.intermediate_size = 64, c.num_layers = layers;
    c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 8, c.max_positions = 64;
    Generator init(1);
    models::Llama model(c, init);
    EXPECT_EQ(allocations_per_step(model), std::make_pair(int64_t(0), int64_t(0))) << layers << " layers";
    // Kiln's own GPT (kiln train fortunes-gpt, then kiln sample) too.
    models::GptConfig g;
    g.vocab_size = 300, g.block_size = 64, g.n_layer = layers, g.n_head = 4, g.n_embd = 32;
    models::Gpt gpt(g, init, nullptr);
    EXPECT_EQ(allocations_per_step(gpt), std::make_pair(int64_t(0), int64_t(0))) << layers << " GPT layers";
  }
}

// The sampler's steps too, with every knob on: the penalties' counts and the
// sampler's buffers are sized once (docs/SAMPLING.md).
TEST(DecodeAllocations, SamplingWithPenaltiesTakesNothingFromTheHeap) {
  const models::Sampling s{.temperature = 0.8, .top_k = 40, .top_p = 0.9, .min_p = 0.05,
                           .repetition_penalty = 1.1, .repetition_window = 64, .presence_penalty = 0.5,
                           .frequency_penalty = 0.3};
  const int64_t vocab = 5000, steps = 20;
  models::TokenPenalties penalties(s, vocab, std::vector<int32_t>{1, 17, 250, 3, 99}, 5 + 3 + steps);
  std::vector<float> logits(static_cast<size_t>(vocab)), row(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) logits[size_t(i)] = float((i * 7919) % 1000) / 100.0f;
  Generator gen(5);
  auto step = [&] {
    std::copy(logits.begin(), logits.end(), row.begin());
    penalties.apply(row);
    penalties.accept(models::sample_token(row, s, gen));
  };
  for (int i = 0; i < 3; ++i) step();
  EXPECT_EQ(kiln_test::allocations_during([&] {
              for (int i = 0; i < steps; ++i) step();
            }),
            0);
}

}  // namespace
}  // namespace kiln
