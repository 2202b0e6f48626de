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

std::vector<SftExample> pack_examples(const std::vector<SftExample>& examples, const std::vector<int64_t>& order,
                                      int64_t length) {
  KILN_CHECK(length >= 2, "packing needs rows of at least 2 tokens");
  std::vector<SftExample> rows(1);
  for (int64_t i : order) {
    const SftExample& e = examples[size_t(i)];
    for (size_t t = 0; t < e.ids.size(); ++t) {
      if (int64_t(rows.back().ids.size()) == length) rows.emplace_back();
      rows.back().ids.push_back(e.ids[t]);
      rows.back().learn.push_back(e.learn[t]);
    }
  }
  return rows;
}

SftLoader::SftLoader(const std::vector<SftExample>& examples, int64_t batch_size, uint64_t seed, int32_t pad,
                     int64_t pack_to)
    : examples_(examples), batch_size_(batch_size), seed_(seed), pad_(pad), pack_to_(pack_to) {
  set_state({});
  KILN_CHECK(batch_size >= 1 && batch_size <= int64_t(rows_.size()), "a batch of ", batch_size, " rows from ",
             rows_.size(), pack_to > 0 ? " packed rows" : " examples", "; use --batch-size of at most that");
}

void SftLoader::set_state(const data::LoaderState& s) {
  const std::vector<int64_t> order =
      data::seeded_permutation(int64_t(examples_.size()), data::derive_seed(seed_, s.epoch));
  if (pack_to_ > 0) {
    rows_ = pack_examples(examples_, order, pack_to_);
  } else {
    rows_.clear();
    for (int64_t i : order) rows_.push_back(examples_[size_t(i)]);
  }
  KILN_CHECK(s.position <= rows_.size(), "loader position ", s.position, " is past the ", rows_.size(), " rows");
  state_ = s;
}

// An epoch's last partial batch is dropped, as the token loaders do.
SftLoader::Batch SftLoader::next() {
  if (state_.position + uint64_t(batch_size_) > rows_.size()) set_state({state_.epoch + 1, 0});
  const size_t first = size_t(state_.position);
  state_.position += uint64_t(batch_size_);
  return sft_batch(rows_, first, size_t(batch_size_), pad_);
}

}  // namespace kiln::recipes
