// What one training step of a recipe is made of: its model, its AdamW
// settings and its loss. The recipe's own training and `kiln plan` (which
// runs the step on the meta device to measure its memory) build the step
// from the same StepParts, so the plan cannot drift from what trains.
#pragma once
#include <functional>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "kiln/nn/lora.h"
#include "kiln/nn/module.h"
#include "kiln/optim/optimizer.h"

namespace kiln::recipes {

struct StepRequest {
  uint64_t seed = 0;
  nlohmann::json model_config;  // recipe-specific (the GPT's GptConfig); empty: the recipe's default
  std::string checkpointing = "none";  // activation checkpointing: none | selective | blocks
  // Hugging Face models (kiln train sft): LoRA adapters on a frozen base,
  // which is kept in `frozen_dtype` (bf16 under --precision bf16, as sft does).
  std::optional<nn::LoraConfig> lora;
  DType frozen_dtype = DType::f32;
};

struct StepParts {
  std::shared_ptr<nn::Module> model;  // on the CPU, initialised
  std::shared_ptr<Generator> dropout_gen;
  optim::AdamWOptions adamw;
  // The mean loss of inputs x against targets y (both with the batch as
  // dim 0, already on the model's device).
  std::function<Tensor(const Tensor& x, const Tensor& y)> loss;
  // One example's input and target shapes and dtypes (the batch dim is
  // prepended).
  Shape x_shape, y_shape;
  DType x_dtype = DType::f32, y_dtype = DType::i64;
};

}  // namespace kiln::recipes
