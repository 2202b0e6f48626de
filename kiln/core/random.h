// A seeded generator whose whole state is (seed, offset): it draws element
// `offset + i` of a Philox stream, so saving two integers saves the state and
// every platform draws the same numbers.
#pragma once
#include <cmath>
#include <cstdint>

#include "kiln/core/philox.h"

namespace kiln {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }

  float uniform() { return philox_uniform(seed_, 0, offset_++); }  // [0, 1)
  // Standard normal by Box-Muller (uses two uniforms).
  float normal() {
    float u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0f * std::log(1.0f - u1)) * std::cos(6.2831853071795864f * u2);
  }
  // Integer in [0, n).
  uint64_t below(uint64_t n) {
    PhiloxOutput r = philox4x32_10(seed_ ^ 0x5851F42D4C957F2Dull, offset_++);
    uint64_t x = (uint64_t(r.v[0]) << 32) | r.v[1];
    return n ? x % n : 0;
  }
  // Reserves `count` draws for a device-side consumer (dropout) and returns
  // where they start.
  uint64_t advance(uint64_t count) {
    uint64_t start = offset_;
    offset_ += (count + 3) / 4 * 4;
    return start;
  }

 private:
  uint64_t seed_, offset_;
};

}  // namespace kiln
