// A language model from a GGUF file (kiln/io/gguf.h), built by the same
// family rows as a Hugging Face folder: the file's metadata read as the
// config.json transformers would write for it, its tensors mapped to
// transformers' names (both by the architecture's row:
// models/hf/gguf_architectures.h), each layer's expert tensor split into
// its experts, and the query and key projections of llama's files
// un-permuted (llama.cpp's converter interleaves each head's rotary halves
// so its RoPE rotates adjacent pairs).
// Its tokenizer and chat template come from its metadata too
// (kiln/text/gguf_vocab.h). Weights (kiln/io/gguf_quants.h): F32, F16 and
// BF16 as they are; the quantized matrices in Kiln's formats for them
// (Q8_0 as int8b, Q4_0 as int4, the K-quants and IQ4_XS as the file's
// blocks, ...), multiplied by their own kernels; any other quantized tensor
// dequantized to f32 at load.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/io/gguf.h"
#include "models/common/language_model.h"
#include "models/hf/gguf_architectures.h"
#include "models/hf/hf_export.h"
#include "models/hf/hf_model.h"

namespace kiln::models {

// The model, its weights views of the file's mapping (q and k un-permuted
// copies), in `dtype`, or else the token embedding's (F32 norms beside F16
// matrices become F16 copies): converted copies where the file's type differs.
std::shared_ptr<LanguageModel> load_gguf_language_model(const GgufFile& file, std::optional<DType> dtype = std::nullopt);

// What load_gguf_language_model's weights take (with the dtype it picks when
// none is asked for), from the file's header alone: the matrices it keeps in
// the file's quantized types or in f16 (`kept`: the formats Kiln holds them
// in, at their sizes there), every other tensor in the model's dtype.
// What `kiln plan --serve` counts for a GGUF file.
struct GgufWeightBytes {
  size_t total = 0, kept = 0;
  DType dtype = DType::f32;
  std::vector<std::string> kept_types;  // the file's types of the kept matrices ("Q4_K", "F16", ...)
};
GgufWeightBytes gguf_weight_bytes(const GgufFile& file);

// A small tensor read beside the model (a reranker's head, an embedder's
// projections) in f32 on the CPU, whatever its type in the file.
Tensor gguf_f32_tensor(const GgufFile& file, const GgufTensorInfo& t);

// A reranker's head in a causal model's file (cls.output: llama.cpp's converter writes Qwen3-Reranker's "yes"
// and "no" rows of its output there), [labels, hidden] in f32.
Tensor gguf_classifier_head(const GgufFile& file);

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
