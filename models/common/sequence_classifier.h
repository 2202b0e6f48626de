// A sequence classifier on a causal language model, as transformers'
// *ForSequenceClassification builds one: a head "score" (no bias) reads the
// final hidden state of each row's last real token (the model attends
// causally, so that token has seen the whole text).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/layers.h"
#include "models/common/language_model.h"

namespace kiln::models {

// A text classifier: ids [B, T], row b's first lengths[b] tokens real (the
// rest padding) -> logits [B, labels]. BERT's and a causal LM's with a head.
class SequenceClassifier : public nn::Module {
 public:
  using nn::Module::forward;
  virtual Tensor forward(const Tensor& ids, const std::vector<int64_t>& lengths) = 0;
  // With each token's type (token_type_ids [B, T]: a cross-encoder's second
  // text is type 1 in BERT's); a model without token types ignores them.
  virtual Tensor forward(const Tensor& ids, const Tensor& token_types, const std::vector<int64_t>& lengths) {
    (void)token_types;
    return forward(ids, lengths);
  }
  // A new head for other labels (fine-tuning on a data set's own), drawn as
  // transformers initialises one: N(0, stddev) weights, zero bias. Encoders'
  // classifiers have one; a causal LM's head is made new by its run instead.
  virtual void replace_classifier(const std::vector<std::string>& labels, double stddev, Generator& init);
};

// A classification layer [labels, hidden] drawn as transformers initialises
// one (N(0, stddev) weights, zero bias), on `device`: what replace_classifier puts in.
std::shared_ptr<nn::Linear> new_classifier_layer(int64_t hidden, const std::vector<std::string>& labels, double stddev,
                                                 Generator& init, Device device);

class CausalLmClassifier : public SequenceClassifier {
 public:
  // The head is drawn N(0, stddev), as transformers initialises it.
  CausalLmClassifier(std::shared_ptr<LanguageModel> model, int64_t hidden, int64_t labels, double stddev,
                     Generator& init);
  // ids [B, T], row b's first lengths[b] tokens real (padding after) -> logits [B, labels].
  Tensor forward(const Tensor& ids, const std::vector<int64_t>& lengths) override;

 private:
  std::shared_ptr<LanguageModel> model_;
  std::shared_ptr<nn::Linear> score_;
};

}  // namespace kiln::models
