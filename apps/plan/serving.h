// `kiln plan --model hf:DIR --serve`: the memory a Hugging Face language
// model takes to serve, from its config.json alone. The model is built on
// the meta device (no weights, no memory) as the loader builds it; its
// matrices count at their quantized size under --quantize (what kiln serve
// --quantize holds), everything else in the file's dtype; each stream's
// keys and values are the pages of the model's own cache (kiln/nn/kv_cache.h)
// at the full context. A GGUF file's weights count as the loader holds them
// (models/hf/gguf_model.h: gguf_weight_bytes), its quantized matrices at
// Kiln's size for their format.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kiln/core/quantized.h"
#include "kiln/io/gguf.h"

namespace kiln::plan {

struct ServingMemory {
  std::string weights;               // "bfloat16", or "int4 (matrices) and bfloat16"
  size_t weight_bytes = 0;           // all of them
  size_t quantized_bytes = 0;        // the quantized matrices' share
  size_t kv_bytes_per_stream = 0;    // at the full context: the worst case the totals count
  size_t kv_bytes_per_position = 0;
  int64_t context = 0;               // positions a stream's cache may hold
};

// `gguf`: the file hf_config was read from, if it is one.
ServingMemory serving_memory(const nlohmann::json& hf_config, std::optional<QuantFormat> quantize,
                             const GgufFile* gguf = nullptr);
// The text kiln plan prints: weights, cache per stream, the total for
// `streams`, and against `budget` bytes (0: none) whether it fits and how many streams do.
std::string serving_memory_text(const ServingMemory& m, int64_t streams, size_t budget, const std::string& target);

}  // namespace kiln::plan
