// kiln plan --serve against what loading measures: for fixtures of three
// families, f32 and bf16, plain and quantized, the predicted weight bytes
// equal the loaded model's (parameters plus quantized matrices) and the
// predicted cache per stream equals what new_cache() allocates.
#include <gtest/gtest.h>

#include "apps/plan/serving.h"
#include "kiln/nn/layers.h"
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
