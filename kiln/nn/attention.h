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

  // Inference with a KV cache: x [1, n, C] holds the positions from `past`
  // on; their keys and values are written into k_cache / v_cache
  // [1, H, capacity, D] at [past, past + n), and each attends to every
  // cached position up to its own. No gradients.
  Tensor forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t past);
  // Prompts of B sequences in one pass: x [B, T, C], row b's first
  // lengths[b] positions real and the rest padding after them. Each row's
  // real keys and values go into *k_caches[b] / *v_caches[b] at [0,
  // lengths[b]); attention is causal, so padding never reaches a real
  // position. No gradients.
  Tensor forward_prompts(const Tensor& x, const std::vector<Tensor*>& k_caches, const std::vector<Tensor*>& v_caches,
                         const std::vector<int64_t>& lengths);
  // One new position for each of B sequences with caches of their own
  // (continuous batching): x [B, 1, C]; row b's key and value go into
  // *k_caches[b] / *v_caches[b] at pasts[b], and it attends to its cache's
  // first pasts[b] + 1 positions. The projections run as one batch; only
  // the attention itself is per sequence. No gradients.
  Tensor forward_decode(const Tensor& x, const std::vector<Tensor*>& k_caches, const std::vector<Tensor*>& v_caches,
                        const std::vector<int64_t>& pasts);

  std::shared_ptr<Linear> c_attn, c_proj;

 private:
  int64_t n_embd_, n_head_;
  std::shared_ptr<Dropout> resid_dropout_;
};

}  // namespace kiln::nn
