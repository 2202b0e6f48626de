// The architectures Kiln loads from Hugging Face folders, one entry per
// config.json model_type: how to read the config, build the module, and name
// its parameters in the checkpoint.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/bert/bert.h"
#include "models/common/language_model.h"
#include "models/llama/llama.h"

namespace kiln::models {

struct CheckpointName {
  std::string name;        // the tensor's name in the checkpoint
  bool transposed = false;  // stored [in, out] (GPT-2's Conv1D)
};

struct CausalLmFamily {
  std::string model_type;
  // Builds the module from config.json, randomly initialised (under a
  // MetaParametersGuard: on the meta device, for a checkpoint to provide the
  // weights or a plan to count them), refusing any key it does not implement.
  std::function<std::shared_ptr<LanguageModel>(const nlohmann::json& config)> build;
  // A Kiln parameter name -> the checkpoint's.
  std::function<CheckpointName(const std::string& parameter)> checkpoint_name;
  // Checkpoint tensors that are not parameters and may be left unused (buffers).
  std::function<bool(const std::string& tensor)> ignorable = [](const std::string&) { return false; };
  // LoRA: peft's default target modules for this model_type, and whether its
  // checkpoint stores those layers [in, out] (GPT-2's Conv1D: peft's fan_in_fan_out).
  std::vector<std::string> lora_targets;
  bool lora_fan_in_fan_out = false;
};

struct ClassifierFamily {
  std::string model_type;
  std::function<std::shared_ptr<SequenceClassifier>(const nlohmann::json& config)> build;
  // The encoder alone (BertModel: no labels needed), for embeddings.
  std::function<std::shared_ptr<TextEncoder>(const nlohmann::json& config)> build_encoder;
  std::function<bool(const std::string& tensor)> ignorable;
  std::string base;  // where a classifier keeps the encoder's weights ("bert", "distilbert", "roberta", "model")
};

// nullptr when `model_type` is not supported.
const ClassifierFamily* find_classifier_family(const std::string& model_type);
std::string supported_classifier_types();
// config.json's id2label, in id order (an error naming the problem if it is missing or malformed).
std::vector<std::string> classifier_labels(const nlohmann::json& config, const std::string& model_type);
const CausalLmFamily* find_causal_lm_family(const std::string& model_type);
// A Llama-like family's config.json (llama, mistral, qwen2, gemma, phi3, ...) as the
// module's LlamaConfig, read as the family reads it (an error names any key it does not implement).
LlamaConfig read_llama_config(const nlohmann::json& config, const std::string& model_type);
std::string supported_causal_lm_types();

}  // namespace kiln::models
