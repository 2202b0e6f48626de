// What the decoding kernels (quantized_matmul.cpp, row_group_product.cpp)
// share: the activations quantized for them, each row's blocks of 32 to int8
// levels as ggml's Q8_0, with what the weight formats' zero points and
// minimums need; and what their VNNI paths take.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "kiln/core/quantized.h"

namespace kiln::cpu {

// Levels, scales and level sums per row and block (the sums for int4z's
// zero points and Q4_1's and Q5_1's minimums). For the 4- and 5-bit formats
// the levels of each pair of blocks are stored in the order the paired
// kernel loads them (see dot_rows_paired), the row padded with a zero block
// to a whole pair, and with the format's fixed zero point (Q4_0's, Q5_0's;
// else 0) multiplied out per integer lane.
struct QuantizedActivations {
  int64_t blocks = 0;
  int64_t stored_blocks = 0;  // blocks, or rounded up to a pair
  std::vector<int8_t> levels;
  std::vector<float> scales;
  std::vector<int32_t> sums;
  // Paired: per block 4 lanes of -zero * (sum of the lane's 8 levels); iq4_nl and grouped int8b: 8 of -128 *
  // (sum of its 4); or none.
  std::vector<int32_t> zero_lanes;
};

// Where level j of block b (within its pair: b % 2) goes in the paired
// order: the pair's first halves, then its second halves.
constexpr int64_t paired_index(int64_t b, int64_t j) {
  return (b % 2) * (kQuantBlock / 2) + (j % (kQuantBlock / 2)) + (j / (kQuantBlock / 2)) * kQuantBlock;
}

// The instructions a VNNI path is compiled for.
#define KILN_VNNI [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]]

// kIq4nlValues + 128: unsigned, for vpdpbusd (the activations' zero lanes take the 128 off).
inline constexpr std::array<uint8_t, 16> kIq4nlRaised = [] {
  std::array<uint8_t, 16> raised{};
  for (size_t i = 0; i < raised.size(); ++i) raised[i] = uint8_t(kIq4nlValues[i] + 128);
  return raised;
}();

}  // namespace kiln::cpu
