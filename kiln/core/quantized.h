// Quantized weight matrices: a [rows, cols] matrix (a linear's [out, in], an
// embedding's [vocab, dim]) stored in 8 or 4 bits with float scales, for
// inference. The block of 32 columns is the unit of storage and of the
// product, as in ggml's Q8_0 and Q4_0: a backend multiplies activations
// quantized to int8 per block of 32 with these weights in integer
// arithmetic (kiln/cpu/quantized_matmul.cpp), and every other op stays
// unaware of quantization.
//
//  int8: one scale per row (per output channel), w = scale * q, q in [-127, 127].
//  int8b: the same levels with one scale per group of 32 columns (ggml's
//        Q8_0, which GGUF files hold, maps onto it exactly).
//  int4: one scale per group of 32 columns, w = scale * (u - zero), u in
//        [0, 15]; zero is 8 (symmetric, Q4_0's), or per group (asymmetric,
//        --quantize int4z) where the group's minimum and maximum set it.
//        A byte holds column j of its group in the low nibble and column
//        j + 16 in the high one.
//  q4_1, q5_0, q5_1: ggml's Q4_1, Q5_0 and Q5_1, read from GGUF files: per
//        group of 32, w = scale * u + min (q4_1, q5_1) or scale * (u - 16)
//        (q5_0); u in [0, 15] (int4's packing) or [0, 31] (int4's packing of
//        the low 4 bits, then the 32 fifth bits as a little-endian word,
//        bit c for column c: 20 bytes a group).
//  f16: IEEE half precision, 2 bytes a weight (a GGUF file's F16 matrices,
//        which `data` holds as f16 [rows, cols], unpadded, often a view of
//        the file), multiplied with f32 activations as llama.cpp multiplies
//        them: read at 2 bytes, widened in registers (kiln/cpu/few_rows_product.h).
//        Not quantized, but like the others a stored form that only the
//        CPU's products and lookups read.
//  iq4_nl: ggml's IQ4_NL, read from GGUF files: int4's packing and f32
//        scale per group of 32, but a level u stands for kIq4nlValues[u], a
//        table of 16 values spaced as the weights usually are (closer near
//        0), w = scale * kIq4nlValues[u]. IQ4_XS files load as it too.
//  q2_k .. q6_k, iq4_xs: ggml's K-quants and IQ4_XS, read from GGUF files
//        (not made by quantize_matrix): `data` holds the file's blocks of 256
//        as they are (kiln/core/quantized_k.h), the columns a multiple of 256.
// Columns are padded with zeros to a multiple of 32.
//
// Rows in groups: an int4, iq4_nl or int8b matrix may hold its rows in
// groups of kRowGroup (grouped_rows, made by group_rows): for each block b,
// the group's eight rows' block b side by side, in `data` and in `scales`,
// so that decoding reads eight rows as one stream and shares each activation
// load among them (llama.cpp repacks Q4_0 and IQ4_NL, and with AMX Q8_0, the
// same way). The rows after the last whole group stay one after another.
// Every reader of a row goes through block_index. A K-quant's (q2_k .. iq4_xs)
// rows may be in groups too, its blocks of 256 rearranged within the group
// (kiln/core/quantized_k.h): their readers go through k_block_of_row.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

enum class QuantFormat : uint8_t {
  int8, int4, int4_zero, int8_block, q4_1, q5_0, q5_1, f16, iq4_nl,
  q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs  // the blocks of 256 last
};
constexpr int64_t kQuantBlock = 32;
constexpr int64_t kRowGroup = 8;
constexpr int64_t kFiveBitBlockBytes = kQuantBlock / 2 + 4;  // q5_0, q5_1: the nibbles, then the fifth bits
// IQ4_NL's and IQ4_XS's levels (ggml's kvalues_iq4nl): signed, within +-127.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// A block of 32 levels of 4 bits (int4, int4z, q4_1: 16 bytes, column j in
// byte j's low nibble, column j + 16 in its high one) or of 5 (q5_0, q5_1:
// the same nibbles, then the fifth bits as a little-endian word, bit c for
// column c), unpacked to a level a byte in column order.
inline void unpack_levels(const uint8_t* block, bool five_bit, uint8_t* levels) {
  constexpr int64_t half = kQuantBlock / 2;
  uint32_t fifth = 0;
  if (five_bit) std::memcpy(&fifth, block + half, 4);
  for (int64_t j = 0; j < half; ++j) {
    levels[j] = uint8_t((block[j] & 0x0f) | ((fifth >> j) & 1) << 4);
    levels[j + half] = uint8_t((block[j] >> 4) | ((fifth >> (j + half)) & 1) << 4);
  }
}

const char* quant_format_name(QuantFormat f);  // "int8", "int4", "int4z", "int8b", "q4_k", ...
std::vector<std::string> quant_format_names();  // the four Kiln quantizes to: int8, int4, int4z, int8b
// One of those four; anything else is an error naming them.
QuantFormat parse_quant_format(const std::string& name);

struct QuantizedMatrix {
  QuantFormat format = QuantFormat::int8;
  int64_t rows = 0, cols = 0;  // the float matrix's shape
  DType dtype = DType::f32;    // the float matrix's dtype: what products and lookups give back
  Tensor data;    // u8: int8, int8b [rows, padded cols] (two's complement); int4, q4_1, iq4_nl [rows, padded cols / 2];
                  //     q5_0, q5_1 [rows, padded cols / 32 * 20]; K-quants [rows, cols / 256 * block bytes];
                  // f16 [rows, cols] for f16
  Tensor scales;  // f32: int8 [rows]; the others of 32 [rows, padded cols / 32]; K-quants, f16: undefined
  Tensor zeros;   // u8 [rows, padded cols / 32] for int4_zero, else undefined
  Tensor mins;    // f32 [rows, padded cols / 32] for q4_1 and q5_1, else undefined
  bool grouped_rows = false;  // rows in groups of kRowGroup (above); the tensors' shapes are the same either way

  int64_t padded_cols() const { return (cols + kQuantBlock - 1) / kQuantBlock * kQuantBlock; }
  int64_t blocks() const { return padded_cols() / kQuantBlock; }
  size_t bytes() const;  // what the tensors hold
  Device device() const { return data.device(); }
  bool eight_bit() const { return format == QuantFormat::int8 || format == QuantFormat::int8_block; }
  bool five_bit() const { return format == QuantFormat::q5_0 || format == QuantFormat::q5_1; }
  bool k_quant() const { return format >= QuantFormat::q2_k; }  // (iq4_xs included: blocks of 256)
  bool half() const { return format == QuantFormat::f16; }
  bool lookup() const { return format == QuantFormat::iq4_nl; }  // levels through kIq4nlValues
  int64_t grouped_row_end() const { return grouped_rows ? rows / kRowGroup * kRowGroup : 0; }
  // Where row `row`'s block b is: the index of its block in `data` and of its value in each array of one a block.
  int64_t block_index(int64_t row, int64_t b) const { return block_index(row) + b * block_step(row); }
  int64_t block_index(int64_t row) const {  // (of its block 0)
    return row < grouped_row_end() ? row / kRowGroup * blocks() * kRowGroup + row % kRowGroup : row * blocks();
  }
  int64_t block_step(int64_t row) const { return row < grouped_row_end() ? kRowGroup : 1; }  // from a block to the next
};

// The bytes a [rows, cols] matrix takes in `format`: what bytes() gives
// once it is quantized (kiln plan --serve counts with it).
size_t quantized_bytes(QuantFormat format, int64_t rows, int64_t cols);

// Quantizes a contiguous f32 matrix [rows, cols] on the CPU (the weights as loaded).
QuantizedMatrix quantize_matrix(const float* values, int64_t rows, int64_t cols, QuantFormat format, DType dtype);
// A contiguous f16 matrix [rows, cols] kept as it is (format f16, a view of
// `values`), whose products and lookups give `dtype`.
QuantizedMatrix half_matrix(const Tensor& values, DType dtype);
// Whether a format's matrices may hold their rows in groups: int4's, iq4_nl's, int8b's and the K-quants'.
constexpr bool can_group_rows(QuantFormat f) {
  return f == QuantFormat::int4 || f == QuantFormat::iq4_nl || f == QuantFormat::int8_block || f >= QuantFormat::q2_k;
}
// The same matrix with its rows in groups of kRowGroup, or one after another (new tensors; `q` is unchanged).
QuantizedMatrix group_rows(const QuantizedMatrix& q);
QuantizedMatrix ungroup_rows(const QuantizedMatrix& q);
// Row r of the matrix as f32 (cols values): what a lookup and the reference product read.
void dequantize_row(const QuantizedMatrix& q, int64_t row, float* out);

}  // namespace kiln
