// NomicBERT (nomic-embed-text v1 and v1.5, Ollama's nomic-embed-text; the
// model_type "nomic_bert" of its own modeling code, and llama.cpp's
// "nomic-bert"): BERT's post-norm layers over token and token-type
// embeddings, without position embeddings: rotary positions on the queries
// and keys (one fused Wqkv), and a SwiGLU MLP (fc2(fc11(x) * silu(fc12(x)))).
// Projections carry no bias unless the config says. Parameters carry the
// checkpoint's names ("emb_ln", "encoder.layers.N.attn.Wqkv", ...).
#pragma once
#include <optional>

#include "models/common/text_encoder.h"

namespace kiln::models {

struct NomicBertConfig {
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0;
  int64_t max_positions = 2048, type_vocab_size = 2;  // type_vocab_size 0: no token types
  double layer_norm_eps = 1e-12, rope_theta = 1000;
  bool qkv_bias = false, fc1_bias = false, fc2_bias = false;  // qkv_proj_bias, mlp_fc1_bias, mlp_fc2_bias
  std::optional<int64_t> pad_token_id;
};

class NomicBertEncoder : public TextEncoder {
 public:
  NomicBertEncoder(const NomicBertConfig& config, Generator& init);
  using TextEncoder::forward;
  Tensor forward(const Tensor& ids, const std::vector<int64_t>& lengths) override;
  int64_t width() const override { return config_.hidden_size; }
  int64_t max_tokens() const override { return config_.max_positions; }
  int64_t pad_id() const override { return config_.pad_token_id.value_or(0); }

 private:
  NomicBertConfig config_;
  struct Parts;
  std::shared_ptr<Parts> parts_;
};

}  // namespace kiln::models
