#include "models/gpt/text_classifier.h"

#include "kiln/nn/layers.h"

namespace kiln::models {

namespace {

// A container whose children are named by the caller.
class Named : public nn::Module {
 public:
  template <typename M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> m) {
    return register_module(name, std::move(m));
  }
};

}  // namespace

TextClassifier::TextClassifier(const GptConfig& c, int64_t classes, Generator& init,
                               std::shared_ptr<Generator> dropout_gen)
    : config_(c) {
  KILN_CHECK(classes >= 2, "a classifier needs at least 2 classes, got ", classes);
  auto transformer = register_module("transformer", std::make_shared<Named>());
  wte_ = transformer->add("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd, init, 0.02));
  wpe_ = transformer->add("wpe", std::make_shared<nn::Embedding>(c.block_size, c.n_embd, init, 0.01));
  drop_ = transformer->add("drop", std::make_shared<nn::Dropout>(c.dropout, dropout_gen));
  auto h = transformer->add("h", std::make_shared<Named>());
  for (int64_t i = 0; i < c.n_layer; ++i) blocks_.push_back(h->add(std::to_string(i), std::make_shared<GptBlock>(c, init, dropout_gen)));
  ln_f_ = transformer->add("ln_f", std::make_shared<nn::LayerNorm>(c.n_embd));
  head_ = register_module("head", std::make_shared<nn::Linear>(c.n_embd, classes, init));
  gpt2_init(*this, c, init);
}

Tensor TextClassifier::forward(const Tensor& ids) {
  KILN_CHECK(ids.dim() == 2 && ids.size(1) <= config_.block_size, "text classifier: ids must be [B, T <= ",
             config_.block_size, "], got ", shape_str(ids.shape()));
  const int64_t B = ids.size(0), T = ids.size(1);
  // Which positions hold text: from the ids on the host (B x T small integers).
  std::vector<int64_t> host = ids.to_vector<int64_t>();
  std::vector<float> mask(host.size()), count(size_t(B), 0.f);
  for (size_t i = 0; i < host.size(); ++i) {
    mask[i] = host[i] == pad_id() ? 0.f : 1.f;
    count[i / size_t(T)] += mask[i];
  }
  for (float& n : count) n = n > 0 ? 1.f / n : 0.f;
  const Device device = ids.device();
  Tensor x = drop_->forward(add(wte_->forward(ids), wpe_->forward(arange(T, DType::i64, device))));
  for (const auto& block : blocks_) x = block->forward(x);
  x = ln_f_->forward(x);
  Tensor m = Tensor::from_vector(mask, {B, T, 1}).to(device).to(x.dtype());
  Tensor pooled = mul(sum(mul(x, m), {1}), Tensor::from_vector(count, {B, 1}).to(device).to(x.dtype()));
  return head_->forward(pooled);
}

}  // namespace kiln::models
