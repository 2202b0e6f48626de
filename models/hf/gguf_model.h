// A language model from a GGUF file (kiln/io/gguf.h), built by the same
// family rows as a Hugging Face folder: the file's metadata read as the
// config.json transformers would write for it (llama.*: sizes, heads, RoPE
// base, norm epsilon), its tensors mapped to transformers' names by a
// table (blk.N.attn_q.weight -> model.layers.N.self_attn.q_proj.weight),
// and the query and key projections un-permuted (llama.cpp's converter
// interleaves each head's rotary halves so its RoPE rotates adjacent pairs).
// Its tokenizer and chat template come from its metadata too
// (kiln/text/gguf_vocab.h). Weights: F32, F16 and BF16 as they are; Q8_0 and
// Q4_0 matrices as Kiln's int8b and int4 (kiln/io/gguf_quants.h, products
// in integers); the other quantized types dequantized to f32 at load (their
// own kernels are to come). Architectures: llama (Llama, Mistral, TinyLlama,
// SmolLM, ... as llama.cpp converts them) and qwen3.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kiln/io/gguf.h"
#include "models/common/language_model.h"
#include "models/hf/hf_export.h"
#include "models/hf/hf_model.h"

namespace kiln::models {

// The config.json of the model a GGUF file holds (model_type and the sizes);
// an architecture Kiln does not read from GGUF is an error naming it.
nlohmann::json hf_config_from_gguf(const GgufFile& file);

// The model, its weights views of the file's mapping (q and k un-permuted
// copies), in `dtype`, or else the token embedding's (F32 norms beside F16
// matrices become F16 copies): converted copies where the file's type differs.
std::shared_ptr<LanguageModel> load_gguf_language_model(const GgufFile& file, std::optional<DType> dtype = std::nullopt);

// The model, its tokenizer and its end-of-generation ids: what
// load_hf_causal_lm gives for a folder (`dir` is the file's path).
HfCausalLm load_gguf_causal_lm(const std::string& path, std::optional<DType> dtype = std::nullopt);

// The Hugging Face folder a GGUF file stands for, but its weights:
// config.json (with architectures and the special token ids),
// tokenizer.json (the GGUF tokenizer as tokenizers runs it),
// tokenizer_config.json (the chat template, bos/eos and whether BOS is added)
// and generation_config.json (the end-of-generation ids). `kiln export
// gguf:FILE --format hf` adds the weights of the model it loads.
HfFolderContents gguf_folder_files(const std::string& path);

}  // namespace kiln::models
