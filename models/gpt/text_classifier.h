// A text classifier on the GPT backbone: token and position embeddings, the
// GPT-2 blocks, a final layernorm, the mean of the token states over the
// real (not padding) positions, and a linear head to the classes. The
// blocks are causal and padding only follows the text, so no real token
// ever attends to padding.
#pragma once
#include "models/gpt/gpt.h"

namespace kiln::models {

class TextClassifier : public nn::Module {
 public:
  // config.vocab_size includes the padding id, which is its last id.
  TextClassifier(const GptConfig& config, int64_t classes, Generator& init, std::shared_ptr<Generator> dropout_gen);
  // ids [B, T] (i64, padded with pad_id()) -> logits [B, classes]
  Tensor forward(const Tensor& ids) override;
  int64_t pad_id() const { return config_.vocab_size - 1; }
  const GptConfig& config() const { return config_; }

 private:
  GptConfig config_;
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Dropout> drop_;
  std::vector<std::shared_ptr<GptBlock>> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::Linear> head_;
};

}  // namespace kiln::models
