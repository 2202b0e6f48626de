// ggml's K-quants as Kiln holds them (QuantFormat q2_k .. q6_k, and IQ4_XS's
// blocks of 256 beside them, iq4_xs): the
// blocks of a GGUF file as they are, 256 values each (a super-block of
// sub-blocks with 6- or 8-bit scales under one f16 scale), so a Q4_K_M file
// stays 4.5 bits a weight in memory. Read by the products
// (kiln/cpu/kquant_matmul.cpp) and by dequantize_row.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/core/quantized.h"

namespace kiln {

constexpr int64_t kSuperBlock = 256;

// Bytes of one super-block (constexpr: the products' loops over a block's lines unroll).
constexpr int64_t k_block_bytes(QuantFormat format) {
  switch (format) {
    case QuantFormat::q2_k: return 84;
    case QuantFormat::q3_k: return 110;
    case QuantFormat::q4_k: return 144;
    case QuantFormat::q5_k: return 176;
    case QuantFormat::q6_k: return 210;
    case QuantFormat::iq4_xs: return 136;
    default: KILN_FAIL("quantized format ", quant_format_name(format), " is not a K-quant");
  }
}
// The 256 values of one block.
void dequantize_k_block(QuantFormat format, const uint8_t* block, float* out);
// Q4_K's and Q5_K's eight sub-block scales and minimums (6 bits each, packed
// in 12 bytes), a byte each in two 32-bit words apiece (scales 0-3, 4-7).
// Scales 0-3 and minimums 0-3 are the low 6 bits of bytes 0-3 and 4-7; 4-7
// take their low 4 bits from bytes 8-11 and their top 2 from the top bits of
// bytes 0-3 (scales) and 4-7 (minimums). As words (ggml's trick): four word
// operations instead of sixteen byte ones. Inline: the products call it once per block.
struct K4ScaleWords {
  uint32_t scales[2], mins[2];
};
inline K4ScaleWords k4_scale_words(const uint8_t* q) {
  uint32_t w[3];  // (three loads: one memcpy of 12 bytes went through the stack)
  for (int i = 0; i < 3; ++i) std::memcpy(&w[i], q + 4 * i, 4);
  constexpr uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  return {{w[0] & low6, (w[2] & low4) | (((w[0] >> 6) & low2) << 4)},
          {w[1] & low6, ((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4)}};
}
inline void k4_scales_mins(const uint8_t* q, uint8_t* scales, uint8_t* mins) {
  const K4ScaleWords words = k4_scale_words(q);
  std::memcpy(scales, words.scales, 8);
  std::memcpy(mins, words.mins, 8);
}

// A K-quant's rows in groups of kRowGroup (QuantizedMatrix::grouped_rows):
// each block of 256 columns of the group's eight rows, 8 x 84, 110, 144,
// 176, 210 or 136 bytes, rearranged so that decoding reads one stream with a
// row in each 32-bit lane (kiln/cpu/kquant_row_group.cpp), the bytes
// unchanged in number. A block's pieces (KGroupPiece) follow one another in
// the group's block, each the eight rows' in units: a unit of `unit` bytes of
// row r at 8 unit u + unit r for the piece's u-th unit. Units of 2 are the
// f16 scales, of 1 the packed sub-block scales as byte planes (byte j of each
// row side by side), of 4 the levels (bytes 4u .. 4u + 3 of every row: lane
// u % 8 of a 32-byte chunk of levels, one 32-byte load for the eight rows).
//   Q2_K: d, dmin, the 16 bytes of scales and minimums, the 64 of levels;
//   Q3_K: d, the 12 bytes of scales, the 64 of levels' low bits, hmask's 32 (their third bits);
//   Q4_K: d, dmin, the 12 bytes of scales and minimums, the 128 of levels;
//   Q5_K: the same, with qh's 32 bytes (levels' fifth bits) before the levels, in one piece with them;
//   Q6_K: d, the 16 signed scales, ql's 128 bytes, qh's 64;
//   IQ4_XS: d, scales_h's 2 bytes, scales_l's 4, the 128 of levels.
// The group's rows' blocks b sit at b * k_group_bytes in the group's bytes.
struct KGroupPiece {
  int64_t begin, bytes, unit;  // where in a row's block, how long, and the unit
};
using KGroupLayout = std::array<KGroupPiece, 4>;
template <QuantFormat F>
inline constexpr KGroupLayout kKGroupLayout = {};
template <>
inline constexpr KGroupLayout kKGroupLayout<QuantFormat::q2_k> = {{{80, 2, 2}, {82, 2, 2}, {0, 16, 1}, {16, 64, 4}}};
template <>
inline constexpr KGroupLayout kKGroupLayout<QuantFormat::q3_k> = {{{108, 2, 2}, {96, 12, 1}, {32, 64, 4}, {0, 32, 4}}};
template <>
inline constexpr KGroupLayout kKGroupLayout<QuantFormat::q4_k> = {{{0, 2, 2}, {2, 2, 2}, {4, 12, 1}, {16, 128, 4}}};
template <>
inline constexpr KGroupLayout kKGroupLayout<QuantFormat::q5_k> = {{{0, 2, 2}, {2, 2, 2}, {4, 12, 1}, {16, 160, 4}}};
template <>
inline constexpr KGroupLayout kKGroupLayout<QuantFormat::q6_k> = {
    {{208, 2, 2}, {192, 16, 1}, {0, 128, 4}, {128, 64, 4}}};
template <>
inline constexpr KGroupLayout kKGroupLayout<QuantFormat::iq4_xs> = {{{0, 2, 2}, {2, 2, 1}, {4, 4, 1}, {8, 128, 4}}};
// Where piece p starts in a group's block.
template <QuantFormat F>
constexpr int64_t k_group_piece_at(size_t p) {
  int64_t at = 0;
  for (size_t i = 0; i < p; ++i) at += kRowGroup * kKGroupLayout<F>[i].bytes;
  return at;
}

// fn.template operator()<F>() for the K-quant `format` as a constant: where a format known at run time
// becomes a kernel's parameter, in one place.
template <typename Fn>
decltype(auto) with_k_quant(QuantFormat format, Fn&& fn) {
  switch (format) {
    case QuantFormat::q2_k: return fn.template operator()<QuantFormat::q2_k>();
    case QuantFormat::q3_k: return fn.template operator()<QuantFormat::q3_k>();
    case QuantFormat::q4_k: return fn.template operator()<QuantFormat::q4_k>();
    case QuantFormat::q5_k: return fn.template operator()<QuantFormat::q5_k>();
    case QuantFormat::q6_k: return fn.template operator()<QuantFormat::q6_k>();
    case QuantFormat::iq4_xs: return fn.template operator()<QuantFormat::iq4_xs>();
    default: KILN_FAIL("quantized format ", quant_format_name(format), " is not a K-quant");
  }
}
constexpr int64_t k_group_bytes(QuantFormat format) { return kRowGroup * k_block_bytes(format); }
// One row's block into its group's block, and back.
void place_in_k_group(QuantFormat format, const uint8_t* block, int64_t row, uint8_t* group);
void take_from_k_group(QuantFormat format, const uint8_t* group, int64_t row, uint8_t* block);
// Row `row`'s block b of a K-quant matrix: where it is, or (rows in groups) gathered into `scratch` (of
// kMaxKBlockBytes).
constexpr int64_t kMaxKBlockBytes = 210;
const uint8_t* k_block_of_row(const QuantizedMatrix& q, int64_t row, int64_t b, uint8_t* scratch);

// Q3_K's sixteen sub-block scales, signed (the stored 6 bits minus 32):
// scale i takes its low 4 bits from bytes 0-7 (low nibbles, then high ones)
// and its top 2 from bits 2 (i / 4) of byte 8 + i % 4. As words, four scales a word.
inline void k3_scales(const uint8_t* packed, int8_t* scales) {
  uint32_t w[3];
  for (int i = 0; i < 3; ++i) std::memcpy(&w[i], packed + 4 * i, 4);
  constexpr uint32_t low4 = 0x0f0f0f0f, low2 = 0x03030303;
  const uint32_t words[4] = {(w[0] & low4) | ((w[2] & low2) << 4), (w[1] & low4) | (((w[2] >> 2) & low2) << 4),
                             ((w[0] >> 4) & low4) | (((w[2] >> 4) & low2) << 4),
                             ((w[1] >> 4) & low4) | (((w[2] >> 6) & low2) << 4)};
  std::memcpy(scales, words, 16);
  for (int i = 0; i < 16; ++i) scales[i] = int8_t(scales[i] - 32);
}

// IQ4_XS's eight sub-block scales, signed (the stored 6 bits minus 32): scale
// i takes its low 4 bits from nibble i of scales_l (bytes 4-7 of a block,
// low nibble first) and its top 2 from bits 2i of scales_h (bytes 2-3).
inline void iq4_xs_scales(const uint8_t* block, int8_t* scales) {
  const unsigned high = unsigned(block[2]) | unsigned(block[3]) << 8;
  for (int i = 0; i < 8; ++i)
    scales[i] = int8_t((((block[4 + i / 2] >> (4 * (i % 2))) & 0xf) | (((high >> (2 * i)) & 3) << 4)) - 32);
}

}  // namespace kiln
