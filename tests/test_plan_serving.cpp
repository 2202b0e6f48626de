// kiln plan --serve against what loading measures: for fixtures of three
// families, f32 and bf16, plain and quantized, the predicted weight bytes
// equal the loaded model's (parameters plus quantized matrices) and the
// predicted cache per stream equals what new_cache() allocates.
#include <gtest/gtest.h>

#include <set>

#include "apps/plan/serving.h"
#include "kiln/nn/layers.h"
#include "models/hf/gguf_model.h"
#include "models/hf/hf_model.h"
#include "tests/hf_test_util.h"

namespace kiln {
namespace {

TEST(PlanServing, PredictionsEqualTheLoadedModelToTheByte) {
  const std::pair<const char*, std::optional<QuantFormat>> cases[] = {
      {"llama-gqa", std::nullopt},          {"llama-gqa", QuantFormat::int4}, {"llama-bf16", std::nullopt},
      {"llama-bf16", QuantFormat::int8},    {"gpt2", QuantFormat::int8},      {"mistral", QuantFormat::int4_zero},
      {"llama-mqa-tied", QuantFormat::int4}};
  for (const auto& [name, quantize] : cases) {
    const std::string dir = hf_test::fixture(name);
    const plan::ServingMemory predicted = plan::serving_memory(models::read_hf_config(dir), quantize);
    auto lm = models::load_hf_causal_lm(dir);
    const size_t quantized = quantize ? nn::quantize_weights(*lm.model, *quantize) : 0;
    size_t weights = quantized;
    for (const auto& p : lm.model->parameters()) weights += p.nbytes();
    const std::string what = std::string(name) + " " + (quantize ? quant_format_name(*quantize) : "plain");
    EXPECT_EQ(predicted.weight_bytes, weights) << what;
    EXPECT_EQ(predicted.quantized_bytes, quantized) << what;
    // A stream at the full context: the pages it holds, measured on the pool's tensors.
    models::KvCache cache = lm.model->new_cache();
    cache.reserve(cache.capacity());
    nn::KvPool& pool = cache.pool();
    size_t page_bytes = 0;
    for (int64_t l = 0; l < pool.layout().layers; ++l)
      page_bytes += (pool.keys(l).nbytes() + pool.values(l).nbytes()) / size_t(pool.pages());
    EXPECT_EQ(predicted.kv_bytes_per_stream, size_t(pool.pages_held()) * page_bytes) << what;
    EXPECT_EQ(predicted.context, cache.capacity()) << what;
  }
}

// A GGUF file's weights as the loader holds them, from its header alone: gguf-tiny's F32 file, its F16 one (the
// matrices kept f16, the norms f32), and llama-quantize's Q8_0, Q4_0, Q4_K_M (with Q5_0 and Q8_0 fallbacks) and
// IQ4_NL files, each to the byte of the model loaded from it.
TEST(PlanServing, AGgufFileCountsAsTheModelLoadedFromIt) {
  const std::string dir = hf_test::fixture("gguf-tiny");
  for (const char* name : {"model-f32.gguf", "model-f16.gguf", "model-q8_0.gguf", "model-q4_0.gguf",
                           "model-q4_k_m.gguf", "model-iq4_nl.gguf"}) {
    const GgufFile file = GgufFile::open(dir + "/" + name);
    const plan::ServingMemory predicted =
        plan::serving_memory(models::read_hf_config(file.path()), std::nullopt, &file);
    const auto lm = models::load_gguf_causal_lm(file.path());
    size_t kept = 0, parameters = 0;
    std::set<const void*> seen;  // a matrix two modules share counts once
    lm.model->for_each_module([&](const std::string&, nn::Module& m) {
      if (auto* w = dynamic_cast<nn::WeightModule*>(&m); w && w->quantized && seen.insert(w->quantized.get()).second)
        kept += w->quantized->bytes();
    });
    for (const auto& p : lm.model->parameters()) parameters += p.nbytes();
    EXPECT_EQ(kept > 0, std::string(name) != "model-f32.gguf") << name;  // all but F32's matrices are kept
    EXPECT_EQ(predicted.quantized_bytes, kept) << name;
    EXPECT_EQ(predicted.weight_bytes, parameters + kept) << name;
    EXPECT_EQ(predicted.context, lm.model->new_cache().capacity()) << name;
  }
  const GgufFile file = GgufFile::open(dir + "/model-q4_0.gguf");
  EXPECT_THROW(plan::serving_memory(models::read_hf_config(file.path()), QuantFormat::int4, &file), Error);
}

TEST(PlanServing, SaysWhetherStreamsFit) {
  plan::ServingMemory m;
  m.weights = "int4 (matrices) and bfloat16";
  m.weight_bytes = 4 << 20;
  m.kv_bytes_per_stream = 1 << 20;
  m.context = 2048;
  const std::string text = plan::serving_memory_text(m, 3, 8 << 20, "a budget");
  EXPECT_NE(text.find("total for 3 streams: 7.0 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("fits; 4 streams fit"), std::string::npos) << text;
  EXPECT_NE(plan::serving_memory_text(m, 5, 8 << 20, "a budget").find("does not fit"), std::string::npos);
}

}  // namespace
}  // namespace kiln
