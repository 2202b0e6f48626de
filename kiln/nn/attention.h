// Multi-head causal self-attention with GPT-2's parameter names: c_attn
// projects to q, k, v in one matmul; c_proj mixes the heads back.
#pragma once
#include "kiln/nn/layers.h"

namespace kiln::nn {

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t n_embd, int64_t n_head, double dropout, Generator& init,
                      std::shared_ptr<Generator> dropout_gen);
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]
  // Selective activation checkpointing: `recompute_x` gives x's values again
  // in backward, so neither x nor the merged heads are kept for the linears'
  // weight gradients (they are recomputed from tensors kept anyway).
  Tensor forward(const Tensor& x, std::function<Tensor()> recompute_x);

  std::shared_ptr<Linear> c_attn, c_proj;

 private:
  int64_t n_embd_, n_head_;
  std::shared_ptr<Dropout> resid_dropout_;
};

}  // namespace kiln::nn
