// Batches of fine-tuning examples (apps/recipes/sft_data.h) for training
// and validation.
#pragma once
#include <vector>

#include "apps/recipes/sft_data.h"
#include "kiln/core/tensor.h"
#include "kiln/data/loader_state.h"

namespace kiln::recipes {

// Batches of examples in a seeded order, reshuffled each epoch: inputs
// [B, T] padded with `pad` to the batch's longest example, targets [B, T]
// the next token where the loss counts it and -100 elsewhere. With
// `pack_to` > 0 (--packing) the rows are the epoch's examples packed into
// rows of that many tokens (pack_examples) instead.
class SftLoader {
 public:
  SftLoader(const std::vector<SftExample>& examples, int64_t batch_size, uint64_t seed, int32_t pad,
            int64_t pack_to = 0);
  struct Batch {
    Tensor x, y;
    int64_t tokens = 0;  // targets the loss counts
  };
  Batch next();
  data::LoaderState state() const { return state_; }
  void set_state(const data::LoaderState& s);

 private:
  const std::vector<SftExample>& examples_;
  int64_t batch_size_;
  uint64_t seed_;
  int32_t pad_;
  int64_t pack_to_;
  data::LoaderState state_;
  std::vector<SftExample> rows_;  // this epoch's, in order
};

// Packing (TRL's packing=True): the examples in `order` concatenated and cut
// into rows of `length` tokens (the last may be shorter). Each keeps its
// learned tokens, and an example's first token is never learned, so no
// target is predicted across an example's start.
std::vector<SftExample> pack_examples(const std::vector<SftExample>& examples, const std::vector<int64_t>& order,
                                      int64_t length);

// A batch of the given examples, in order (validation).
SftLoader::Batch sft_batch(const std::vector<SftExample>& examples, size_t first, size_t count, int32_t pad);

}  // namespace kiln::recipes
