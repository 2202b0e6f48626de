#include "apps/recipes/sft_loader.h"

#include <algorithm>

#include "kiln/data/random.h"

namespace kiln::recipes {

SftLoader::Batch sft_batch(const std::vector<SftExample>& examples, size_t first, size_t count, int32_t pad) {
  int64_t T = 0;
  for (size_t i = first; i < first + count; ++i) T = std::max<int64_t>(T, int64_t(examples[i].ids.size()));
  const int64_t B = int64_t(count);
  std::vector<int64_t> x(size_t(B * T), pad), y(size_t(B * T), -100);
  SftLoader::Batch b;
  for (int64_t r = 0; r < B; ++r) {
    const SftExample& e = examples[first + size_t(r)];
    for (size_t t = 0; t < e.ids.size(); ++t) {
      x[size_t(r * T) + t] = e.ids[t];
      if (t + 1 < e.ids.size() && e.learn[t + 1]) {
        y[size_t(r * T) + t] = e.ids[t + 1];
        ++b.tokens;
      }
    }
  }
  b.x = Tensor::from_vector<int64_t>(x, {B, T});
  b.y = Tensor::from_vector<int64_t>(y, {B, T});
  return b;
}

SftLoader::SftLoader(const std::vector<SftExample>& examples, int64_t batch_size, uint64_t seed, int32_t pad)
    : examples_(examples), batch_size_(batch_size), seed_(seed), pad_(pad) {
  KILN_CHECK(batch_size >= 1 && batch_size <= int64_t(examples.size()), "a batch of ", batch_size, " examples from ",
             examples.size(), "; use --batch-size of at most the number of examples");
  set_state({});
}

void SftLoader::set_state(const data::LoaderState& s) {
  KILN_CHECK(s.position <= examples_.size(), "loader position ", s.position, " is past the ", examples_.size(),
             " examples");
  state_ = s;
  order_ = data::seeded_permutation(int64_t(examples_.size()), data::derive_seed(seed_, s.epoch));
}

// An epoch's last partial batch is dropped, as the token loaders do.
SftLoader::Batch SftLoader::next() {
  if (state_.position + uint64_t(batch_size_) > examples_.size()) set_state({state_.epoch + 1, 0});
  std::vector<SftExample> picked;
  for (int64_t i = 0; i < batch_size_; ++i) picked.push_back(examples_[size_t(order_[state_.position + uint64_t(i)])]);
  state_.position += uint64_t(batch_size_);
  return sft_batch(picked, 0, picked.size(), pad_);
}

}  // namespace kiln::recipes
