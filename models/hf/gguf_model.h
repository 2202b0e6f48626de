// A language model from a GGUF file (kiln/io/gguf.h), built by the same
// family rows as a Hugging Face folder: the file's metadata read as the
// config.json transformers would write for it (llama.*: sizes, heads, RoPE
// base, norm epsilon), its tensors mapped to transformers' names by a
// table (blk.N.attn_q.weight -> model.layers.N.self_attn.q_proj.weight),
// and the query and key projections un-permuted (llama.cpp's converter
// interleaves each head's rotary halves so its RoPE rotates adjacent pairs).
// So far: the llama architecture, F32, F16 and BF16 tensors.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kiln/io/gguf.h"
#include "models/common/language_model.h"

namespace kiln::models {

// The config.json of the model a GGUF file holds (model_type and the sizes);
// an architecture Kiln does not read from GGUF is an error naming it.
nlohmann::json hf_config_from_gguf(const GgufFile& file);

// The model, its weights views of the file's mapping (q and k un-permuted copies; converted copies in
// `dtype` when one is given and differs from the file's float type).
std::shared_ptr<LanguageModel> load_gguf_language_model(const GgufFile& file, std::optional<DType> dtype = std::nullopt);

}  // namespace kiln::models
