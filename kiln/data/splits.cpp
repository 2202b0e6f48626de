#include "kiln/data/splits.h"

#include <algorithm>
#include <cmath>

#include "kiln/core/error.h"
#include "kiln/data/random.h"

namespace kiln::data {

namespace {
// Sub-stream ids keep the split and the shuffles independent even when a
// caller passes the same number as both seeds.
constexpr uint64_t kSplitStream = 1;
constexpr uint64_t kEpochStream = 2;
}  // namespace

Split split_indices(int64_t n, int64_t n_validation, uint64_t seed) {
  KILN_CHECK(n >= 0 && n_validation >= 0 && n_validation <= n, "split: cannot hold out ", n_validation,
             " of ", n, " examples");
  std::vector<int64_t> p = seeded_permutation(n, derive_seed(seed, kSplitStream));
  Split s;
  s.validation.assign(p.begin(), p.begin() + n_validation);
  s.train.assign(p.begin() + n_validation, p.end());
  std::sort(s.validation.begin(), s.validation.end());
  std::sort(s.train.begin(), s.train.end());
  return s;
}

Split split_documents(int64_t n, double validation_fraction, uint64_t seed) {
  KILN_CHECK(validation_fraction >= 0 && validation_fraction < 1, "split: validation fraction ",
             validation_fraction, " must be in [0, 1)");
  int64_t n_val = int64_t(std::llround(double(n) * validation_fraction));
  if (n >= 2 && validation_fraction > 0) n_val = std::clamp<int64_t>(n_val, 1, n - 1);
  return split_indices(n, n_val, seed);
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, uint64_t epoch) {
  return seeded_permutation(n, derive_seed(derive_seed(seed, kEpochStream), epoch));
}

}  // namespace kiln::data
