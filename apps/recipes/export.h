// `kiln export SOURCE --format hf|peft|gguf --out PATH`: a Kiln GPT run, a
// fine-tuning run, or a model Kiln loaded from hf:DIR or gguf:FILE, as a Hugging Face
// folder; a LoRA run's adapters as a peft folder; a language model as a GGUF file.
#pragma once
#include <string>
#include <vector>

#include "models/hf/hf_export.h"

namespace kiln::recipes {

// `quantize` ("", int8, int8b, int4, int4z): a language model's matrices written
// quantized (Kiln's own format: config.json's quantization_config has
// quant_method "kiln"; Kiln loads it, transformers does not).
// A folder's config and tokenizer files, as they are (no weights), or a GGUF file's as a folder would hold them.
models::HfFolderContents hf_folder_files(const std::string& dir);

void export_hf(const std::string& source, const std::string& out, const std::string& quantize = "");

// A fine-tuning run (kiln train sft) as a Hugging Face folder: every weight
// of a full fine-tune, or a LoRA run's adapters merged into its base (`merge`
// must say so: a LoRA run's own export is export_peft).
void export_sft_hf(const std::string& run, const std::string& out, bool merge);
// hf:DIR, gguf:FILE or a fine-tuning run (its LoRA adapters merged, with
// `merge`) as one GGUF file (models/hf/gguf_export.h) of `type`: f32, f16, bf16 or q8_0.
// Returns notes on what the file could not hold (models::write_gguf_model).
std::vector<std::string> export_gguf(const std::string& source, const std::string& out, const std::string& type,
                                     bool merge);
// A LoRA run's adapters as peft's folder: adapter_config.json and
// adapter_model.safetensors, which PeftModel.from_pretrained loads onto the base.
void export_peft(const std::string& run, const std::string& out);

}  // namespace kiln::recipes
