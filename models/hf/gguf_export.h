// `kiln export SOURCE --format gguf`: a model Kiln loads (hf:DIR, gguf:FILE,
// a fine-tuning run merged) written as the GGUF file llama.cpp's
// convert_hf_to_gguf.py would write for its folder: the architecture's
// metadata, the tokenizer (byte-level BPE, with its llama.cpp pre-tokenizer
// type), the chat template, and the tensors under llama.cpp's names (llama's
// q and k permuted as its converter permutes them), in F32, F16, BF16 or Q8_0
// (norms and other vectors in F32, as the converter keeps them), each
// layer's experts in one tensor per projection. Families: those Kiln reads
// from GGUF (models/hf/gguf_architectures.h) and mistral; where llama.cpp
// fixes what a folder can vary (Gemma's attention scale and sliding
// layers, SmolLM3's unrotated layers, experts in every layer), a model that
// differs is refused by name.
#pragma once
#include <string>
#include <vector>

#include "models/hf/hf_export.h"

namespace kiln::models {

// `type`: f32, f16, bf16 or q8_0; `name`: general.name (llama.cpp's
// converter writes the model folder's name, which llama.cpp reads for a few
// families' token attributes: Phi-3's). The file appears whole or not at all.
// Returns what the file cannot hold that the model has (Mistral's sliding
// window), for the user to read.
std::vector<std::string> write_gguf_model(const std::string& path, const HfFolderContents& folder,
                                          const std::string& type, const std::string& name);

}  // namespace kiln::models
