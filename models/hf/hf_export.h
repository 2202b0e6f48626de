// Writing Hugging Face folders: what `kiln export --format hf` writes, which
// transformers loads with from_pretrained and which Kiln loads as hf:DIR.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/nn/module.h"
#include "models/gpt/gpt.h"

namespace kiln::models {

struct HfFolderContents {
  nlohmann::json config, generation_config, tokenizer_config;
  std::string tokenizer_json;
  nn::NamedTensors tensors;  // under the checkpoint's names, on the CPU
};

// Writes config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json and generation_config.json into `out`, which must
// not exist or be empty. The folder appears whole or not at all: it is
// written beside `out` and renamed into place.
void write_hf_folder(const std::string& out, const HfFolderContents& contents);

// peft's adapter folder: adapter_config.json and adapter_model.safetensors,
// which peft.PeftModel.from_pretrained loads onto the base model.
void write_peft_folder(const std::string& out, const nlohmann::json& adapter_config, const nn::NamedTensors& tensors);
// A LoRA parameter's name in peft's file: "base_model.model." + the base
// layer's checkpoint path + ".lora_A.weight".
std::string peft_name(const std::string& parameter, const std::string& model_type);
// The LoRA adapters of `model` under peft's names, on the CPU.
nn::NamedTensors peft_tensors(const nn::Module& model, const std::string& model_type);

// The parameters of `model` under the checkpoint names of its family
// (model_type), transposed back where the checkpoint stores [in, out];
// quantized matrices as NAME.qdata, NAME.scales (and NAME.zeros), in
// Kiln's [out, in] layout, which only Kiln reads.
nn::NamedTensors checkpoint_tensors(const nn::Module& model, const std::string& model_type);
// config.json's quantization_config for a model with quantized matrices
// (quant_method "kiln"), or null.
nlohmann::json quantization_config(const nn::Module& model);

// Kiln's GPT as GPT2LMHeadModel: its config and tensors. `tokenizer_json`
// is the run's tokenizer as tokenizer.json; `end_of_text` its id.
HfFolderContents gpt_as_hf(const Gpt& model, const std::string& tokenizer_json, int32_t end_of_text);

}  // namespace kiln::models
