// A language model's body as a text encoder: the decoder embedders
// (Qwen3-Embedding, gte-Qwen2, e5-mistral, EmbeddingGemma) pool its final
// hidden states (the last token's, as sentence-transformers' lasttoken
// pooling reads them; EmbeddingGemma's mean). Padding after a row's tokens
// changes none of theirs where attention is causal; a bidirectional body
// (EmbeddingGemma) masks it.
#pragma once
#include <memory>

#include "models/common/language_model.h"
#include "models/common/text_encoder.h"

namespace kiln::models {

class LanguageModelEncoder : public TextEncoder {
 public:
  LanguageModelEncoder(std::shared_ptr<LanguageModel> model, int64_t width, int64_t pad_id)
      : model_(register_module("model", std::move(model))), width_(width), pad_id_(pad_id) {}
  using TextEncoder::forward;
  Tensor forward(const Tensor& ids, const std::vector<int64_t>& lengths) override {
    return model_->padded_hidden_states(ids, lengths);
  }
  int64_t width() const override { return width_; }
  int64_t max_tokens() const override { return model_->context_length(); }
  int64_t pad_id() const override { return pad_id_; }

 private:
  std::shared_ptr<LanguageModel> model_;
  int64_t width_, pad_id_;
};

}  // namespace kiln::models
