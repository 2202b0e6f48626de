// The Llama architecture, which also covers Mistral (a sliding attention
// window), Qwen2 (biases on q, k and v), Qwen3 and OLMo 2 (norms on the
// queries and keys; OLMo 2's norms after each sub-layer), Granite (its
// multipliers), SmolLM3 (layers without rotary positions) and Phi-3 (fused
// projections, partial rotary embeddings): RMSNorm, rotary positions
// (with Llama 3's frequency scaling), SwiGLU, grouped- and multi-query
// attention, and a tied or untied head. Built from Kiln's ops, so it trains
// as well as it generates. Parameters carry transformers' names
// ("model.layers.0.self_attn.q_proj.weight"), so a checkpoint maps onto the
// module name for name.
#pragma once
#include <algorithm>
#include <optional>
#include <vector>

#include "models/gpt/gpt.h"
#include "models/llama/rope.h"

namespace kiln::models {

struct LlamaConfig {
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, max_positions = 0;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  bool attention_bias = false;  // q, k, v and o (Llama's attention_bias)
  bool qkv_bias = false;        // q, k and v only (Qwen2)
  bool mlp_bias = false;
  bool tie_word_embeddings = false;
  int64_t sliding_window = 0;  // 0: every earlier position is seen
  double attention_dropout = 0;  // on the attention probabilities, in training
  RopeScaling rope_scaling;  // rope_parameters / rope_scaling (models/llama/rope.h)
  // An RMSNorm on the queries and keys before the rotation: over each head
  // (Qwen3, head_dim wide) or over the whole projection (OLMo 2).
  enum class QkNorm { none, per_head, whole } qk_norm = QkNorm::none;
  // OLMo 2: each sub-layer's output is normed before its residual add
  // (post_attention_layernorm, post_feedforward_layernorm), its input not.
  bool norm_after = false;
  // Granite: embeddings times embedding_multiplier; attention scaled by
  // attention_multiplier (0: 1/sqrt(head_dim)); each sub-layer's output
  // times residual_multiplier before its residual add; logits divided by
  // logits_scaling.
  double embedding_multiplier = 1, attention_multiplier = 0, residual_multiplier = 1, logits_scaling = 1;
  // SmolLM3: which layers rotate (no_rope_layers); empty: every layer.
  std::vector<bool> rope_layers;
  // transformers' embedding padding_idx: the pad token's row learns nothing.
  std::optional<int64_t> pad_token_id;
  // Phi-3: q, k and v as one projection (qkv_proj), gate and up as one
  // (gate_up_proj, gate first); dropout on each sub-layer's output before its
  // residual add (resid_pdrop), in training.
  bool fused_projections = false;
  double residual_dropout = 0;
  // Partial rotary embeddings (partial_rotary_factor): only the first
  // rotary_dim dims of each head rotate; 0: all of them.
  int64_t rotary_dim = 0;
  int64_t rotated_dims() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // Phi-3 (transformers' Phi3ForCausalLM): a cached sequence that grows past
  // longrope's original context is recomputed whole with the long factors,
  // rather than keep the keys its short factors rotated.
  bool rope_recompute_at_switch = false;
};

class Llama : public LanguageModel {
 public:
  Llama(const LlamaConfig& config, Generator& init);
  Tensor forward(const Tensor& ids) override;  // [B, T] -> logits [B, T, vocab]
  // Mean next-token cross-entropy against targets [B, T] (ignore_index -100).
  Tensor loss(const Tensor& ids, const Tensor& targets) override;
  Tensor hidden_states(const Tensor& ids) override;
  // none, or blocks (each layer's input kept; backward re-runs the layer).
  void set_activation_checkpointing(ActivationCheckpointing mode) override;
  Tensor forward_cached(const Tensor& ids, KvCache& cache) override;
  KvCache new_cache() const override;
  Tensor forward_decode(const std::vector<int32_t>& tokens, const std::vector<KvCache*>& caches) override;
  // One padded batch: each row's tokens, then padding after them.
  Tensor forward_prompts(const std::vector<std::vector<int64_t>>& prompts,
                         const std::vector<KvCache*>& caches) override;
  // Generation sees at most this many positions (or the model's own limit),
  // which bounds one stream's pages (Llama 3 would allow 131,072 positions:
  // 16 GiB of cache for the 8B model).
  static constexpr int64_t kMaxCachedPositions = 8192;
  int64_t context_length() const override { return std::min(config_.max_positions, kMaxCachedPositions); }
  int64_t vocab_size() const override { return config_.vocab_size; }
  const LlamaConfig& config() const { return config_; }

 private:
  // The final normed stream of ids [B, T] at positions cos/sin give ([T, D],
  // or [B, 1, 1, D] when decoding); with a step, keys and values go into the pages.
  // `real`: which rows of a padded batch are real (null: all).
  Tensor hidden(const Tensor& ids, const Tensor& cos, const Tensor& sin, const nn::PagedStep* step, bool read_pages,
                const nn::RealRows* real = nullptr);
  // cos and sin [T, D] of positions [first, first + T), in a pass whose
  // furthest position is seq_len - 1 (longrope's factors depend on it).
  std::pair<Tensor, Tensor> rope_rows(int64_t first, int64_t T, int64_t seq_len);
  Tensor head_weight() const;
  Tensor head(const Tensor& x) const;
  Tensor head_input(const Tensor& x) const;  // x / logits_scaling
  // Phi-3's recomputation: true for a cache of `past` positions that `more` new ones take past the original context.
  bool crosses_rope_switch(int64_t past, int64_t more) const;
  const Tensor& anchor() const;
  int ensure_rope(int64_t positions, Device device, int64_t seq_len);  // -> the table in use
  LlamaConfig config_;
  ActivationCheckpointing checkpointing_ = ActivationCheckpointing::none;
  class Decoder;
  std::shared_ptr<Decoder> model_;  // "model.*"
  std::shared_ptr<nn::Linear> lm_head_;
  Tensor rope_cos_[2], rope_sin_[2];  // [positions, head_dim], per frequency set (rope_variant)
};

}  // namespace kiln::models
