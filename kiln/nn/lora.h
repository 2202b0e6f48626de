// LoRA (Hu et al., 2021) as peft builds it: a chosen Linear computes
// W x + b + (alpha / rank) B A dropout(x), where A [rank, in] and B [out, rank]
// train and every other parameter is frozen (no gradient, so no optimizer
// state). The adapters are the Linear's children lora_A and lora_B, so their
// parameters carry peft's names ("model.layers.0.self_attn.q_proj.lora_A.weight")
// and an export loads with peft as is.
#pragma once
#include <string>
#include <vector>

#include "kiln/nn/layers.h"

namespace kiln::nn {

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0;
  // Module names as peft's target_modules: a Linear matches when its path is
  // the name or ends in "." + name; {"all-linear"}: every Linear but the head.
  std::vector<std::string> targets;
  double scale() const { return alpha / double(rank); }
};

// "q_proj,v_proj" -> {"q_proj", "v_proj"}; refuses an empty list or name.
std::vector<std::string> parse_lora_targets(const std::string& list);

// Attaches an adapter to every Linear under `root` that a target names and
// freezes every other parameter; `head` is the output layer all-linear
// leaves alone (peft does too). Returns the adapted layers' paths. A target
// that matches no Linear is an error listing the layers there are.
std::vector<std::string> apply_lora(Module& root, const LoraConfig& config, Generator& init,
                                    std::shared_ptr<Generator> dropout_gen, const std::string& head = "lm_head");

bool is_lora_parameter(const std::string& name);
// The adapters' parameters, by their names under `root`.
NamedTensors lora_parameters(const Module& root);
// Folds every adapter into its layer's weight (W + scale B A, in W's dtype)
// and drops it: what `kiln export --merge` writes, and what inference runs.
void merge_lora(Module& root);

}  // namespace kiln::nn
