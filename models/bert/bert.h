// BERT, DistilBERT, RoBERTa and XLM-RoBERTa: an encoder of post-norm layers
// over token, position and (but DistilBERT) token-type embeddings. Alone
// (transformers' BertModel, as sentence-transformers saves it) it gives each
// token's state, which embeddings pool; for sequence classification (the
// sentiment models of the mission, and most of those on the hub) BERT's
// pooler (tanh over [CLS]), DistilBERT's pre-classifier (ReLU over [CLS]) or
// RoBERTa's classification head (tanh over <s>), then the classifier follow.
// Parameters carry transformers' names for each, from a table of names.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/layers.h"
#include "models/common/sequence_classifier.h"
#include "models/common/text_encoder.h"

namespace kiln::models {

struct BertConfig {
  std::string flavor = "bert";  // "bert", "distilbert" or "roberta" (also XLM-RoBERTa): which names and head
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0, intermediate_size = 0;
  int64_t max_positions = 512, type_vocab_size = 2;  // type_vocab_size 0: no token types (DistilBERT)
  double layer_norm_eps = 1e-12;
  // RoBERTa numbers positions from its padding id + 1 (position_offset), and
  // its word and position embeddings' padding rows get no gradient.
  int64_t position_offset = 0;
  std::optional<int64_t> pad_token_id;
  std::vector<std::string> labels;  // id2label, in id order
  // Dropout, acting in training only, where transformers puts it: on the
  // embeddings and the feed-forward's output (BERT's hidden_dropout_prob,
  // DistilBERT's dropout), on the attention's projection (BERT's only), on
  // the attention probabilities, and on the pooled [CLS] before the classifier.
  double hidden_dropout = 0, attention_output_dropout = 0, attention_dropout = 0, classifier_dropout = 0;
};

// The encoder alone: its parameters are named as in transformers' BertModel
// ("embeddings.word_embeddings.weight", "encoder.layer.0...").
class BertEncoder : public TextEncoder {
 public:
  BertEncoder(const BertConfig& config, Generator& init);
  using TextEncoder::forward;
  Tensor forward(const Tensor& ids, const std::vector<int64_t>& lengths) override {
    return forward(ids, Tensor(), lengths);
  }
  // token_types [B, T] (undefined: all 0, one segment).
  Tensor forward(const Tensor& ids, const Tensor& token_types, const std::vector<int64_t>& lengths);
  int64_t width() const override { return config_.hidden_size; }
  int64_t max_tokens() const override { return config_.max_positions - config_.position_offset; }
  int64_t pad_id() const override { return config_.pad_token_id.value_or(0); }
  const BertConfig& config() const { return config_; }

 private:
  BertConfig config_;
  struct Parts;  // the submodules, registered on this module
  std::shared_ptr<Parts> parts_;
};

class BertClassifier : public SequenceClassifier {
 public:
  BertClassifier(const BertConfig& config, Generator& init);
  // ids [B, T], every row all real tokens -> class logits [B, labels].
  Tensor forward(const Tensor& ids) override;
  // Rows of different lengths in one pass: row b's first lengths[b] tokens
  // are real and the rest padding, which no token attends to (a key mask),
  // so each row's logits are its own, as if it ran alone.
  Tensor forward(const Tensor& ids, const std::vector<int64_t>& lengths) override {
    return forward(ids, Tensor(), lengths);
  }
  Tensor forward(const Tensor& ids, const Tensor& token_types, const std::vector<int64_t>& lengths) override;
  const BertConfig& config() const { return config_; }
  // A new head for other labels (fine-tuning on a data set's own), drawn as
  // transformers initialises one: N(0, stddev) weights, zero bias.
  void replace_classifier(const std::vector<std::string>& labels, double stddev, Generator& init) override;

 private:
  BertConfig config_;
  std::shared_ptr<BertEncoder> encoder_;  // under transformers' base name ("bert", "distilbert", "roberta")
  struct Head;
  std::shared_ptr<Head> head_;
};

}  // namespace kiln::models
