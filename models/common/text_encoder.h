// A bidirectional text encoder (BERT's family, ModernBERT): what sequence
// classifiers put a head on and sentence embeddings pool
// (models/hf/hf_embedder.h).
#pragma once
#include <vector>

#include "kiln/nn/layers.h"

namespace kiln::models {

class TextEncoder : public nn::Module {
 public:
  using nn::Module::forward;
  Tensor forward(const Tensor& ids) override { return forward(ids, {}); }
  // ids [B, T], row b's first lengths[b] tokens real (empty: all) -> the
  // last layer's states [B, T, width]; no token attends to padding.
  virtual Tensor forward(const Tensor& ids, const std::vector<int64_t>& lengths) = 0;
  virtual int64_t width() const = 0;
  virtual int64_t max_tokens() const = 0;  // the most tokens a text may hold
  virtual int64_t pad_id() const = 0;      // what pads a batch's shorter rows
};

}  // namespace kiln::models
