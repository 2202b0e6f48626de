#include "apps/recipes/hf_training.h"

#include "kiln/core/error.h"
#include "models/hf/families.h"

namespace kiln::recipes {

StepParts hf_step_parts(const nlohmann::json& config, const StepRequest& request, int64_t seq_len) {
  const std::string type = config.value("model_type", std::string());
  const models::CausalLmFamily* family = models::find_causal_lm_family(type);
  KILN_CHECK(family, "model_type '", type, "' is not a causal language model Kiln supports (",
             models::supported_causal_lm_types(), ")");
  std::shared_ptr<models::LanguageModel> model = family->build(config);
  KILN_CHECK(seq_len >= 1 && seq_len <= model->context_length(), "a sequence of ", seq_len,
             " tokens does not fit the model's context of ", model->context_length());
  model->set_activation_checkpointing(models::parse_activation_checkpointing(request.checkpointing));
  auto dropout_gen = std::make_shared<Generator>(request.seed);  // config.json's dropouts and LoRA's, as sft's run
  model->use_dropout_generator(dropout_gen);
  if (request.lora) {
    nn::LoraConfig lora = *request.lora;
    if (lora.targets.empty()) lora.targets = family->lora_targets;
    Generator init(request.seed);
    nn::apply_lora(*model, lora, init, dropout_gen);
    for (auto& [name, p] : model->named_parameters())
      if (!p.requires_grad()) nn::move_tensor_in_place(p, p.device(), request.frozen_dtype);
  }
  StepParts p;
  p.model = model;
  p.dropout_gen = dropout_gen;
  p.adamw.weight_decay = 0.0;  // fine-tuning's usual setting (transformers' Trainer default)
  p.loss = [model](const Tensor& x, const Tensor& y) { return model->loss(x, y); };
  p.x_shape = {seq_len};
  p.y_shape = {seq_len};
  p.x_dtype = DType::i64;
  p.y_dtype = DType::i64;
  return p;
}

}  // namespace kiln::recipes
