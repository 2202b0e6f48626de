// Deterministic train/validation splits and per-epoch shuffles.
//
// A split is a fixed, seeded random subset: validation = the first
// `n_validation` entries of seeded_permutation(n, seed), train = the rest,
// each sorted ascending. Random (rather than "the last 5000") because the
// last examples of a file are not guaranteed to be distributed like the rest;
// sorted because a split is a set, and its order is the loader's business.
// The split seed is a constant separate from the run seed, so every run of a
// recipe validates on the same examples and their numbers are comparable.
#pragma once
#include <cstdint>
#include <vector>

namespace kiln::data {

// The seed every recipe uses for its validation split unless told otherwise.
inline constexpr uint64_t kSplitSeed = 0x6b696c6e53504c54ull;  // "kilnSPLT"
// Fashion-MNIST: 5,000 of the 60,000 training images (as many as Keras and
// most tutorials hold out), leaving 55,000 to train on.
inline constexpr int64_t kFashionMnistValidationSize = 5000;
// Fortunes: 5% of the documents (about 760 fortunes, 125 KB of text).
inline constexpr double kTextValidationFraction = 0.05;

struct Split {
  std::vector<int64_t> train;       // ascending
  std::vector<int64_t> validation;  // ascending
};

// Splits indices 0..n-1; throws unless 0 <= n_validation <= n.
Split split_indices(int64_t n, int64_t n_validation, uint64_t seed = kSplitSeed);

// Splits n documents, holding out round(n * fraction) of them (at least one
// when n >= 2 and fraction > 0, so validation is never silently empty).
Split split_documents(int64_t n, double validation_fraction = kTextValidationFraction, uint64_t seed = kSplitSeed);

// The visiting order of `n` items in epoch `epoch`: a permutation that
// depends only on (n, seed, epoch), so any epoch can be recomputed on resume
// without replaying the ones before it.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, uint64_t epoch);

}  // namespace kiln::data
