// ModernBERT (transformers' ModernBertModel and ...ForSequenceClassification):
// a pre-norm encoder without position embeddings: token embeddings and a
// LayerNorm; in each layer rotary positions on the queries and keys
// (a global and a local base), attention over the whole text in every
// global_attn_every_n_layers-th layer and over a window of local_attention
// / 2 positions either side in the others, and a GeGLU MLP (Wi: input and
// gate in one projection); a final norm. LayerNorms and projections carry no
// bias unless the config says. The classifier pools the [CLS] state or the
// mean of the real tokens' states, then a head (dense, activation, norm) and
// the classifier. Parameters carry transformers' names.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "models/common/sequence_classifier.h"
#include "models/common/text_encoder.h"

namespace kiln::models {

struct ModernBertConfig {
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0;
  int64_t max_positions = 8192;
  double norm_eps = 1e-5;
  bool norm_bias = false, attention_bias = false, mlp_bias = false, classifier_bias = false;
  std::vector<bool> sliding_layers;  // per layer: attends within the window (else to every position)
  int64_t window = 64;               // local_attention / 2: positions seen on each side
  double global_theta = 160000, local_theta = 10000;
  bool tanh_gelu = false;             // hidden_activation: gelu (exact) or its tanh approximation
  bool classifier_tanh_gelu = false;  // classifier_activation, likewise
  std::optional<int64_t> pad_token_id;
  std::vector<std::string> labels;  // id2label, in id order (the classifier's)
  bool mean_pooling = false;        // classifier_pooling "mean" (else "cls")
  double embedding_dropout = 0, attention_dropout = 0, mlp_dropout = 0, classifier_dropout = 0;
};

class ModernBertEncoder : public TextEncoder {
 public:
  ModernBertEncoder(const ModernBertConfig& config, Generator& init);
  using TextEncoder::forward;
  Tensor forward(const Tensor& ids, const std::vector<int64_t>& lengths) override;
  int64_t width() const override { return config_.hidden_size; }
  int64_t max_tokens() const override { return config_.max_positions; }
  int64_t pad_id() const override { return config_.pad_token_id.value_or(0); }

 private:
  ModernBertConfig config_;
  struct Parts;
  std::shared_ptr<Parts> parts_;
};

class ModernBertClassifier : public SequenceClassifier {
 public:
  ModernBertClassifier(const ModernBertConfig& config, Generator& init);
  Tensor forward(const Tensor& ids) override { return forward(ids, {}); }
  Tensor forward(const Tensor& ids, const std::vector<int64_t>& lengths) override;
  void replace_classifier(const std::vector<std::string>& labels, double stddev, Generator& init) override;

 private:
  ModernBertConfig config_;
  std::shared_ptr<ModernBertEncoder> model_;
  std::shared_ptr<nn::Linear> dense_, classifier_;
  std::shared_ptr<nn::LayerNorm> norm_;
  std::shared_ptr<nn::Dropout> dropout_;
};

}  // namespace kiln::models
