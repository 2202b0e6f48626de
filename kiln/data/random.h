// The data pipeline's own PRNG. Shuffles and splits must give the same order
// on every platform and standard library, so they use splitmix64 (Steele et
// al., "Fast splittable pseudorandom number generators") with our own bounded
// draw and Fisher-Yates, never std::shuffle or std::uniform_int_distribution,
// whose outputs are implementation-defined.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::data {

// splitmix64's output function: a bijective 64-bit mixer, also used to derive
// independent seeds from (seed, purpose, epoch) tuples.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A seed for sub-stream `stream` of `seed`: mixing twice keeps neighbouring
// (seed, stream) pairs from producing correlated sequences.
inline uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  return mix64(mix64(seed) ^ (stream + 0x9E3779B97F4A7C15ull));
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return mix64(state_);
  }
  // Uniform in [0, n) without modulo bias: reject the top sliver of the range
  // that does not divide evenly by n. Requires n > 0.
  uint64_t below(uint64_t n) {
    uint64_t threshold = (0 - n) % n;  // == 2^64 mod n
    for (;;) {
      uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

 private:
  uint64_t state_;
};

// A uniformly random permutation of 0..n-1 that depends only on (n, seed).
inline std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(size_t(n > 0 ? n : 0));
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = i;
  SplitMix64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates, from the back
    int64_t j = int64_t(rng.below(uint64_t(i) + 1));
    std::swap(p[size_t(i)], p[size_t(j)]);
  }
  return p;
}

}  // namespace kiln::data
