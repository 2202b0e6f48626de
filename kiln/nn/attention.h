// Multi-head causal self-attention with GPT-2's parameter names: c_attn
// projects to q, k, v in one matmul; c_proj mixes the heads back.
#pragma once
#include "kiln/nn/kv_cache.h"
#include "kiln/nn/layers.h"

namespace kiln::nn {

// Attention of a batch held whole, through paged_attention (each sequence's
// keys one page): q [B, T, H, D], k and v [B, T, Hkv, D]; row (b, t)
// attends to positions [0, t] of its sequence when causal, else to [0,
// lengths[b]) (its real tokens). -> [B, T, H * D]. A row's bits do not
// depend on the rows beside it or on the padding after it: batch-invariant
// mode's attention (kiln/backend/batch_invariant.h). No gradients.
Tensor attention_by_rows(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& lengths,
                         bool causal);

// Additive mask [T, T] of causal attention: 0 where query i sees key j (j
// <= i, and j > i - window when window > 0, Mistral's sliding window),
// -inf elsewhere.
Tensor causal_bias(int64_t T, int64_t window, Device device);

// Additive masks of bidirectional attention over a padded batch (encoders,
// EmbeddingGemma), in f32, with a finite blocked value: a padding row whose
// window holds padding alone stays finite (it is never read) rather than
// NaN, which its keys would carry into every row's scores in the next layer.
//  key_padding_bias [B, 1, 1, T]: 0 on row b's first lengths[b] keys, blocked
//    after them; undefined when every row is T long (or lengths is empty).
//  symmetric_window_bias [T, T]: 0 where |i - j| <= half_window; undefined
//    when the window holds every pair (T - 1 <= half_window).
Tensor key_padding_bias(const std::vector<int64_t>& lengths, int64_t T, Device device);
Tensor symmetric_window_bias(int64_t T, int64_t half_window, Device device);
// a + b, broadcast; an undefined one adds nothing.
Tensor add_biases(const Tensor& a, const Tensor& b);

// Attention written out, for what the fused op does not do: softmax(q k^T /
// sqrt(D) + bias) v (the softmax in f32), with `probs_dropout` (if any) on
// the probabilities, acting in training mode as transformers' attention
// dropout does. q [B, H, T, D], k and v [B, H, S, D]; bias (undefined:
// none) adds to the scores [B, H, T, S] by broadcasting: a padding, causal
// or window mask. softcap > 0 caps the scaled scores at softcap *
// tanh(score / softcap) before the bias (Gemma 2).
Tensor attention_written_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                             Dropout* probs_dropout = nullptr, double softcap = 0);

class CausalSelfAttention : public Module {
 public:
  // `dropout` on the output (GPT-2's resid_pdrop), `attention_dropout` on
  // the attention probabilities (attn_pdrop; > 0 writes attention out while training).
  CausalSelfAttention(int64_t n_embd, int64_t n_head, double dropout, Generator& init,
                      std::shared_ptr<Generator> dropout_gen, double attention_dropout = 0.0);
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]
  // Selective activation checkpointing: `recompute_x` gives x's values again
  // in backward, so neither x nor the merged heads are kept for the linears'
  // weight gradients (they are recomputed from tensors kept anyway).
  Tensor forward(const Tensor& x, std::function<Tensor()> recompute_x);

  // Inference over a paged KV cache (kiln/nn/kv_cache.h): x [B, T, C], its
  // `real` rows new to their sequences (plan_step's rows, in order) and the
  // rest padding after them. Their keys and values go
  // into the pages; with read_pages each new position attends to its
  // sequence's pages up to itself (cached positions, or batch-invariant
  // mode), otherwise to this pass's keys (causal, so padding never reaches
  // a real position). Padding rows come out as zeros. No gradients.
  Tensor forward_paged(const Tensor& x, const PagedStep& step, int64_t layer, const RealRows& real,
                       bool read_pages);

  std::shared_ptr<Linear> c_attn, c_proj;

 private:
  int64_t n_embd_, n_head_;
  std::shared_ptr<Dropout> resid_dropout_, attn_dropout_;
};

}  // namespace kiln::nn
