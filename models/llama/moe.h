// A mixture-of-experts MLP (Mixtral, Qwen3-MoE, OLMoE): a linear router
// (`gate`, no bias) scores each token's experts; softmax over them, in f32,
// and the top k taken (renormalised to sum to 1 where normalize_top_k, as
// Mixtral and Qwen3-MoE's norm_topk_prob do); each expert is a SwiGLU MLP
// (`experts.{e}.gate_proj`, `up_proj`, `down_proj`: Linear modules, so LoRA
// and quantization reach them) run once on all the tokens routed to it, and
// a token's output is its experts' outputs weighted by their probabilities.
// Every op records, so the router and the experts train.
#pragma once

#include "kiln/nn/layers.h"

namespace kiln::models {

struct MoeShape {
  int64_t hidden = 0, intermediate = 0, experts = 0, top_k = 0;
  bool normalize_top_k = false;
};

class MixtureOfExperts : public nn::Module {
 public:
  // Experts of SwiGLU, down(silu(gate(x)) * up(x)): Mixtral's, Qwen3-MoE's and OLMoE's.
  MixtureOfExperts(const MoeShape& shape, Generator& init);
  // x [..., hidden] -> [..., hidden]. While `keep_router_logits` is on, the
  // router's logits [tokens, experts] stay in router_logits() until taken.
  Tensor forward(const Tensor& x) override;
  bool keep_router_logits = false;
  Tensor take_router_logits();

  std::shared_ptr<nn::Linear> gate;

 private:
  struct Expert {
    std::shared_ptr<nn::Linear> gate_proj, up_proj, down_proj;
  };
  // Each token's top_k experts, best first, into chosen: [tokens * top_k]
  // (on the meta device, where no value exists, a fixed spread of the same count).
  void route(const Tensor& probs, std::vector<int64_t>& chosen) const;
  // A decoding step's one token (no gradients, f32 on the CPU): forward's bits by a shorter road.
  Tensor one_token(const Tensor& row, const Tensor& probs, const std::vector<int64_t>& chosen);
  MoeShape shape_;
  std::vector<Expert> experts_;
  Tensor router_logits_;
};

// The load-balancing loss of transformers' load_balancing_loss_func (Switch
// Transformer's): experts * sum over experts of (the share of top-k picks it
// got) * (its mean router probability), both over every MoE layer's tokens.
Tensor load_balancing_loss(const std::vector<Tensor>& router_logits, int64_t experts, int64_t top_k);

}  // namespace kiln::models
