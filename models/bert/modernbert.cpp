#include "models/bert/modernbert.h"

#include <cmath>

#include "kiln/nn/attention.h"
#include "models/bert/rotary_table.h"

namespace kiln::models {

using namespace kiln::nn;

namespace {

Tensor activation(const Tensor& x, bool tanh_gelu) { return tanh_gelu ? gelu(x) : gelu_erf(x); }

class ModernBertLayer : public Module {
 public:
  ModernBertLayer(const ModernBertConfig& c, int64_t index, Generator& init, const std::shared_ptr<Generator>& gen)
      : c_(c), sliding_(c.sliding_layers[size_t(index)]) {
    if (index > 0) attn_norm = register_module("attn_norm", std::make_shared<LayerNorm>(c.hidden_size, c.norm_eps, c.norm_bias));
    auto attn = register_module("attn", std::make_shared<Named>());
    Wqkv = attn->add("Wqkv", std::make_shared<Linear>(c.hidden_size, 3 * c.hidden_size, init, c.attention_bias));
    attn_Wo = attn->add("Wo", std::make_shared<Linear>(c.hidden_size, c.hidden_size, init, c.attention_bias));
    mlp_norm = register_module("mlp_norm", std::make_shared<LayerNorm>(c.hidden_size, c.norm_eps, c.norm_bias));
    auto mlp = register_module("mlp", std::make_shared<Named>());
    Wi = mlp->add("Wi", std::make_shared<Linear>(c.hidden_size, 2 * c.intermediate_size, init, c.mlp_bias));
    mlp_Wo = mlp->add("Wo", std::make_shared<Linear>(c.intermediate_size, c.hidden_size, init, c.mlp_bias));
    probs_dropout = register_module("attention_dropout", std::make_shared<Dropout>(c.attention_dropout, gen));
    out_dropout = register_module("attention_output_dropout", std::make_shared<Dropout>(c.attention_dropout, gen));
    mlp_dropout = register_module("mlp_dropout", std::make_shared<Dropout>(c.mlp_dropout, gen));
  }

  // x [B, T, C]; key_bias [B, 1, 1, T] (padding) or undefined; window_bias [T, T] (this layer's, when it slides).
  Tensor forward_at(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& bias) {
    const int64_t B = x.size(0), T = x.size(1), C = c_.hidden_size, H = c_.num_heads, D = C / H;
    const Tensor qkv = Wqkv->forward(attn_norm ? attn_norm->forward(x) : x);
    auto heads = [&](int64_t part) {
      return transpose(reshape(slice(qkv, -1, part * C, (part + 1) * C), {B, T, H, D}), 1, 2);  // [B, H, T, D]
    };
    const Tensor q = heads(0), k = heads(1), v = heads(2);
    const Tensor cos_x = to_dtype(cos, x.dtype()), sin_x = to_dtype(sin, x.dtype());
    const Tensor q_r = rotary(q, cos_x, sin_x), k_r = rotary(k, cos_x, sin_x);
    const Tensor a = attention_written_out(q_r, k_r, v, bias, probs_dropout.get());
    const Tensor h = x + out_dropout->forward(attn_Wo->forward(reshape(transpose(a, 1, 2), {B, T, C})));
    const Tensor in_gate = Wi->forward(mlp_norm->forward(h));
    const int64_t I = c_.intermediate_size;
    const Tensor act = activation(slice(in_gate, -1, 0, I), c_.tanh_gelu) * slice(in_gate, -1, I, 2 * I);
    return h + mlp_Wo->forward(mlp_dropout->forward(act));
  }
  bool sliding() const { return sliding_; }

  std::shared_ptr<LayerNorm> attn_norm, mlp_norm;
  std::shared_ptr<Linear> Wqkv, attn_Wo, Wi, mlp_Wo;
  std::shared_ptr<Dropout> probs_dropout, out_dropout, mlp_dropout;

 private:
  ModernBertConfig c_;
  bool sliding_;
};

}  // namespace

struct ModernBertEncoder::Parts {
  std::shared_ptr<Embedding> tok_embeddings;
  std::shared_ptr<LayerNorm> embedding_norm, final_norm;
  std::shared_ptr<Dropout> embedding_dropout;
  std::vector<std::shared_ptr<ModernBertLayer>> layers;
};

ModernBertEncoder::ModernBertEncoder(const ModernBertConfig& c, Generator& init)
    : config_(c), parts_(std::make_shared<Parts>()) {
  check_rotary_heads(c.hidden_size, c.num_heads, "modernbert");
  KILN_CHECK(int64_t(c.sliding_layers.size()) == c.num_layers, "modernbert: ", c.sliding_layers.size(),
             " layer types for ", c.num_layers, " layers");
  Parts& p = *parts_;
  const auto gen = std::make_shared<Generator>(0);  // until a run hands the model its own
  auto emb = register_module("embeddings", std::make_shared<Named>());
  p.tok_embeddings = emb->add("tok_embeddings", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, init));
  p.tok_embeddings->padding_idx = c.pad_token_id;
  p.embedding_norm = emb->add("norm", std::make_shared<LayerNorm>(c.hidden_size, c.norm_eps, c.norm_bias));
  p.embedding_dropout = emb->add("drop", std::make_shared<Dropout>(c.embedding_dropout, gen));
  auto layers = register_module("layers", std::make_shared<Named>());
  for (int64_t i = 0; i < c.num_layers; ++i)
    p.layers.push_back(layers->add(std::to_string(i), std::make_shared<ModernBertLayer>(c, i, init, gen)));
  p.final_norm = register_module("final_norm", std::make_shared<LayerNorm>(c.hidden_size, c.norm_eps, c.norm_bias));
}

Tensor ModernBertEncoder::forward(const Tensor& ids, const std::vector<int64_t>& lengths) {
  const Parts& p = *parts_;
  const int64_t B = ids.size(0), T = ids.size(1), D = config_.hidden_size / config_.num_heads;
  KILN_CHECK(T <= config_.max_positions, "the text is ", T, " tokens, more than the model's ", config_.max_positions,
             " positions (max_position_embeddings); shorten it");
  KILN_CHECK(lengths.empty() || int64_t(lengths.size()) == B, "modernbert: ", lengths.size(), " lengths for ", B, " rows");
  const Device device = ids.device();
  Tensor x = p.embedding_dropout->forward(p.embedding_norm->forward(p.tok_embeddings->forward(ids)));
  // No token sees a padding key; a sliding layer's tokens see |i - j| <= window.
  const Tensor key_bias = nn::key_padding_bias(lengths, T, device);
  const Tensor sliding_bias = nn::add_biases(key_bias, nn::symmetric_window_bias(T, config_.window, device));
  const auto [global_cos, global_sin] = rotary_table(T, D, config_.global_theta, device);
  const auto [local_cos, local_sin] = rotary_table(T, D, config_.local_theta, device);
  for (const auto& layer : p.layers)
    x = layer->sliding() ? layer->forward_at(x, local_cos, local_sin, sliding_bias)
                         : layer->forward_at(x, global_cos, global_sin, key_bias);
  return p.final_norm->forward(x);
}

ModernBertClassifier::ModernBertClassifier(const ModernBertConfig& c, Generator& init) : config_(c) {
  KILN_CHECK(!c.labels.empty(), "modernbert: a classifier needs labels (config.json's id2label)");
  model_ = register_module("model", std::make_shared<ModernBertEncoder>(c, init));
  auto head = register_module("head", std::make_shared<Named>());
  dense_ = head->add("dense", std::make_shared<Linear>(c.hidden_size, c.hidden_size, init, c.classifier_bias));
  norm_ = head->add("norm", std::make_shared<LayerNorm>(c.hidden_size, c.norm_eps, c.norm_bias));
  dropout_ = register_module("drop", std::make_shared<Dropout>(c.classifier_dropout, std::make_shared<Generator>(0)));
  classifier_ = register_module("classifier", std::make_shared<Linear>(c.hidden_size, int64_t(c.labels.size()), init));
}

void ModernBertClassifier::replace_classifier(const std::vector<std::string>& labels, double stddev, Generator& init) {
  auto layer = new_classifier_layer(config_.hidden_size, labels, stddev, init, dense_->weight.device());
  drop_module("classifier");
  classifier_ = register_module("classifier", layer);
  config_.labels = labels;
}

Tensor ModernBertClassifier::forward(const Tensor& ids, const std::vector<int64_t>& lengths) {
  const int64_t B = ids.size(0), T = ids.size(1);
  const Tensor states = model_->forward(ids, lengths);
  Tensor pooled;
  if (!config_.mean_pooling) {
    pooled = squeeze(slice(states, 1, 0, 1), 1);  // [B, C]: the [CLS] token's
  } else {  // the mean over each row's real tokens
    std::vector<float> mask(size_t(B * T), 1.0f);
    for (int64_t b = 0; b < B && !lengths.empty(); ++b)
      for (int64_t t = 0; t < T; ++t) mask[size_t(b * T + t)] = t < lengths[size_t(b)] ? 1.0f : 0.0f;
    const Tensor m = to_dtype(Tensor::from_vector(mask, {B, T, 1}).to(ids.device()), states.dtype());
    pooled = sum(states * m, {1}) / sum(m, {1});
  }
  return classifier_->forward(dropout_->forward(norm_->forward(activation(dense_->forward(pooled), config_.classifier_tanh_gelu))));
}

}  // namespace kiln::models
