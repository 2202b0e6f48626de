// The Llama architecture, which also covers Mistral (a sliding attention
// window), Qwen2 (biases on q, k and v), Qwen3 and OLMo 2 (norms on the
// queries and keys; OLMo 2's norms after each sub-layer), Granite (its
// multipliers), SmolLM3 (layers without rotary positions), Phi-3 (fused
// projections, partial rotary embeddings), Gemma 1, 2 and 3 (norms of
// 1 + w, GeGLU, norms on both sides of each sub-layer, soft-capped scores
// and logits, sliding layers between global ones, a local RoPE base) and
// the mixtures of experts (Mixtral, Qwen3-MoE, OLMoE): RMSNorm, rotary positions
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
#include "models/llama/moe.h"
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
  // Gemma: every RMSNorm is x * (1 + w), cast to x's dtype after the
  // product; the MLP's gate is GELU's tanh approximation (gelu_pytorch_tanh);
  // the embedding multiplier is rounded to the model's dtype first.
  bool norm_plus_one = false;
  enum class Activation { silu, gelu_tanh } activation = Activation::silu;
  bool round_embedding_multiplier = false;
  // Norms before each sub-layer; OLMo 2 (norm_after) has none, Gemma 2 and 3
  // (norm_after too) have both: input_layernorm and pre_feedforward_layernorm.
  bool norm_before = true;
  // Gemma 2: attention scores and final logits capped at cap * tanh(x / cap); 0: none.
  double attention_softcap = 0, final_softcap = 0;
  // Gemma 2 and 3: which layers slide over sliding_window (layer_types'
  // sliding_attention); empty: all of them, when sliding_window > 0.
  std::vector<bool> sliding_layers;
  bool slides(int64_t layer) const {
    return sliding_window > 0 && (sliding_layers.empty() || sliding_layers[size_t(layer)]);
  }
  // EmbeddingGemma (Gemma 3's use_bidirectional_attention): every token sees
  // every other, but padding, and a sliding layer's those within
  // sliding_window / 2 either side. An encoder only: it does not generate.
  bool bidirectional = false;
  // Gemma 3: the sliding layers rotate with their own base
  // (rope_local_base_freq), unscaled; 0: as the global ones do.
  double local_rope_theta = 0;
  // Mixture of experts (Mixtral, Qwen3-MoE, OLMoE; models/llama/moe.h): the
  // MLP of each layer moe_layers marks (empty: every layer) is num_experts
  // experts of expert_intermediate_size, experts_per_token per token.
  int64_t num_experts = 0, experts_per_token = 0, expert_intermediate_size = 0;
  bool normalize_top_k = false;
  std::vector<bool> moe_layers;
  bool is_moe(int64_t layer) const { return num_experts > 0 && (moe_layers.empty() || moe_layers[size_t(layer)]); }
  // The loss adds this times the routers' load-balancing loss (transformers'
  // output_router_logits with router_aux_loss_coef); 0: none.
  double router_aux_loss_coef = 0;
};

class Llama : public LanguageModel {
 public:
  Llama(const LlamaConfig& config, Generator& init);
  Tensor forward(const Tensor& ids) override;  // [B, T] -> logits [B, T, vocab]
  // Mean next-token cross-entropy against targets [B, T] (ignore_index -100).
  Tensor loss(const Tensor& ids, const Tensor& targets) override;
  Tensor hidden_states(const Tensor& ids) override;
  Tensor padded_hidden_states(const Tensor& ids, const std::vector<int64_t>& lengths) override;
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

 public:
  // cos and sin of the positions a pass rotates by ([T, D], or [B, 1, T, D]
  // per row); Gemma 3's sliding layers take the local pair (undefined without one).
  struct Rotation {
    Tensor cos, sin, local_cos, local_sin;
  };
  // A bidirectional pass's additive masks (undefined: nothing masked): the
  // global layers' (padding keys) and the sliding layers' (and the window).
  struct BidirectionalMasks {
    Tensor global, sliding;
  };

 private:
  // The final normed stream of ids [B, T] at the positions `rotation` gives;
  // with a step, keys and values go into the pages.
  // `real`: which rows of a padded batch are real (null: all).
  // `masks`: a bidirectional model's (null: causal attention).
  Tensor hidden(const Tensor& ids, const Rotation& rotation, const nn::PagedStep* step, bool read_pages,
                const nn::RealRows* real = nullptr, const BidirectionalMasks* masks = nullptr);
  // Generation and training refuse a bidirectional model by name.
  void check_causal(const char* what) const;
  // The rotation [T, D] of positions [first, first + T), in a pass whose
  // furthest position is seq_len - 1 (longrope's factors depend on it).
  Rotation rope_rows(int64_t first, int64_t T, int64_t seq_len);
  nn::PagedStep plan_step(std::span<KvCache* const> caches, std::span<const int64_t> new_positions) const;
  // One new token for each of the caches (forward_decode, and forward_cached's one more token).
  Tensor decode_step(std::span<const int32_t> tokens, std::span<KvCache* const> caches);
  // The rotation [B, 1, 1, D] of each cache's next position, as each would have it alone.
  Rotation next_rotation(std::span<KvCache* const> caches);
  // Logits capped as Gemma 2 caps them (final_softcap).
  Tensor capped(const Tensor& logits) const;
  Tensor head_weight() const;
  Tensor head(const Tensor& x) const;
  Tensor head_input(const Tensor& x) const;  // x / logits_scaling
  // Phi-3's recomputation: true for a cache of `past` positions that `more` new ones take past the original context.
  bool crosses_rope_switch(int64_t past, int64_t more) const;
  const Tensor& anchor() const;
  // -> the table in use: rope_variant's, or kLocalRope for the local base.
  int ensure_rope(int64_t positions, Device device, int64_t seq_len, bool local = false);
  static constexpr int kLocalRope = 2;
  LlamaConfig config_;
  ActivationCheckpointing checkpointing_ = ActivationCheckpointing::none;
  class Decoder;
  std::shared_ptr<Decoder> model_;  // "model.*"
  std::shared_ptr<nn::Linear> lm_head_;
  Tensor rope_cos_[3], rope_sin_[3];  // [positions, head_dim], per frequency set (rope_variant, kLocalRope)
};

}  // namespace kiln::models
