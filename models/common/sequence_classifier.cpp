#include "models/common/sequence_classifier.h"

#include "kiln/nn/init.h"
#include "kiln/nn/layers.h"

namespace kiln::models {

std::shared_ptr<nn::Linear> new_classifier_layer(int64_t hidden, const std::vector<std::string>& labels, double stddev,
                                                 Generator& init, Device device) {
  KILN_CHECK(!labels.empty(), "a classifier needs labels");
  const int64_t n = int64_t(labels.size());
  auto layer = std::make_shared<nn::Linear>(hidden, n, init);
  layer->load_parameters({{"weight", nn::normal_tensor({n, hidden}, stddev, init)}, {"bias", zeros({n})}});
  layer->to(device);
  return layer;
}

void SequenceClassifier::replace_classifier(const std::vector<std::string>&, double, Generator&) {
  KILN_FAIL("this classifier takes no new labels (a causal language model's head is made new by kiln train classify)");
}


CausalLmClassifier::CausalLmClassifier(std::shared_ptr<LanguageModel> model, int64_t hidden, int64_t labels,
                                       double stddev, Generator& init)
    : model_(register_module("model", std::move(model))) {
  score_ = register_module("score", std::make_shared<nn::Linear>(hidden, labels, init, false));
  if (score_->weight.device().type != DeviceType::meta)
    score_->load_parameters({{"weight", nn::normal_tensor({labels, hidden}, stddev, init)}});
}

Tensor CausalLmClassifier::forward(const Tensor& ids, const std::vector<int64_t>& lengths) {
  const int64_t B = ids.size(0), T = ids.size(1);
  KILN_CHECK(int64_t(lengths.size()) == B, "classifier: ", lengths.size(), " lengths for ", B, " rows");
  const Tensor h = model_->hidden_states(ids);  // [B, T, C]
  std::vector<int64_t> last;
  for (int64_t b = 0; b < B; ++b) {
    KILN_CHECK(lengths[size_t(b)] >= 1 && lengths[size_t(b)] <= T, "classifier: row ", b, " has length ",
               lengths[size_t(b)], " of ", T);
    last.push_back(b * T + lengths[size_t(b)] - 1);
  }
  const Tensor rows = embedding(reshape(h, {B * T, h.size(2)}), Tensor::from_vector<int64_t>(last, {B}).to(ids.device()));
  return score_->forward(rows);
}

}  // namespace kiln::models
