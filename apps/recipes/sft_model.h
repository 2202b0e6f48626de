// The model a fine-tuning run (kiln train sft) trains: a Hugging Face causal
// language model, all of it or LoRA adapters on a frozen base, and what its
// checkpoints need to rebuild it: the base's folder and weights hash, the
// adapters' settings.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/io/checkpoint.h"
#include "kiln/nn/lora.h"
#include "models/hf/hf_model.h"

namespace kiln::recipes {

struct SftSettings {
  std::string base;       // the base model's folder (absolute)
  std::string base_hash;  // models::hf_weights_hash(base)
  std::string data, val;  // JSON Lines files (val: "" for none)
  int64_t max_seq_len = 1024;
  bool packing = false;              // examples packed into rows of max_seq_len (else one a row, padded)
  std::string chat_template;         // a family's name for "messages" lines ("": the folder's own)
  std::optional<nn::LoraConfig> lora;  // none: every weight trains
  std::string lora_from;             // a peft folder the adapters start from ("": fresh)
  std::string quantize_base;         // int8, int8b, int4 or int4z: the frozen base quantized (QLoRA-style); "": not
  // Distillation (kiln/nn/distillation.h): the teacher's folder ("": none).
  std::string teacher;
  double temperature = 2.0, alpha = 0.5;

  nlohmann::json to_json() const;
  static SftSettings from_json(const nlohmann::json& j);
};

// path made absolute, for what a run saves.
std::string absolute_path(const std::string& path);
// The folder a fine-tuning run starts from: hf:DIR's, or a fortunes-gpt run
// exported once into the run directory as a Hugging Face folder (out_dir/name).
std::string fine_tune_folder(const std::string& spec, const std::string& out_dir, const char* name,
                             const std::function<void(const std::string&)>& log);

// The dtype a LoRA run keeps its frozen base in: the half precision it
// computes in (bf16, fp16), else f32. A full fine-tune keeps f32 weights.
DType lora_base_dtype(const std::string& precision);

// The base with LoRA attached as the settings say, its weights in
// `base_dtype`; adapters are f32 and initialised from `seed` (or read from
// lora_from). Returns the adapted layers' paths in `adapted`.
models::HfCausalLm load_sft_model(const SftSettings& s, std::optional<DType> base_dtype, uint64_t seed,
                                  std::shared_ptr<Generator> dropout_gen, std::vector<std::string>* adapted = nullptr);

// A run's checkpoint as a model: the base, the checkpoint's trained weights
// on it, adapters merged when `merge` (inference runs the merged weights).
models::HfCausalLm load_sft_checkpoint(const Checkpoint& ck, bool merge);

// peft's adapter_config.json for adapters on `adapted` layers.
nlohmann::json peft_adapter_config(const SftSettings& s, const std::string& model_type,
                                   const std::vector<std::string>& adapted);

// A peft adapter folder read for --lora-from: its settings (rank, alpha,
// dropout, targets) and tensors by peft name. Features Kiln does not
// implement (DoRA, rsLoRA, trained biases, modules_to_save) are refused by name.
struct PeftAdapter {
  nn::LoraConfig config;
  std::map<std::string, Tensor> tensors;
};
PeftAdapter read_peft_folder(const std::string& dir);

}  // namespace kiln::recipes
