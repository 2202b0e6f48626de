#include "kiln/io/gguf_quants.h"

#include <cstring>

#include "kiln/core/error.h"
#include "kiln/core/quantized_k.h"

namespace kiln {

namespace {

// One block of each type: `x` its bytes, `y` its values.
void q4_0(const uint8_t* x, float* y) {
  const float d = half_at(x);
  for (int j = 0; j < 16; ++j) {
    y[j] = float((x[2 + j] & 0xf) - 8) * d;
    y[j + 16] = float((x[2 + j] >> 4) - 8) * d;
  }
}
void q4_1(const uint8_t* x, float* y) {
  const float d = half_at(x), m = half_at(x + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(x[4 + j] & 0xf) * d + m;
    y[j + 16] = float(x[4 + j] >> 4) * d + m;
  }
}
// Q5_0/Q5_1: the fifth bits of the 32 levels in a little-endian word.
void q5(const uint8_t* qh_bytes, const uint8_t* qs, float d, float m, int offset, float* y) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xf) | int(((qh >> j) << 4) & 0x10), hi = (qs[j] >> 4) | int((qh >> (j + 12)) & 0x10);
    y[j] = float(lo - offset) * d + m;
    y[j + 16] = float(hi - offset) * d + m;
  }
}
void q5_0(const uint8_t* x, float* y) { q5(x + 2, x + 6, half_at(x), 0, 16, y); }
void q5_1(const uint8_t* x, float* y) { q5(x + 4, x + 8, half_at(x), half_at(x + 2), 0, y); }
void q8_0(const uint8_t* x, float* y) {
  const float d = half_at(x);
  for (int j = 0; j < 32; ++j) y[j] = float(int8_t(x[2 + j])) * d;
}
void iq4_nl(const uint8_t* x, float* y) {
  const float d = half_at(x);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(kIq4nlValues[x[2 + j] & 0xf]) * d;
    y[j + 16] = float(kIq4nlValues[x[2 + j] >> 4]) * d;
  }
}
void f32(const uint8_t* x, float* y) { std::memcpy(y, x, 4); }
void f16(const uint8_t* x, float* y) { *y = half_at(x); }
void bf16(const uint8_t* x, float* y) {
  uint16_t h;
  std::memcpy(&h, x, 2);
  *y = bf16_to_float(h);
}

using BlockDequantizer = void (*)(const uint8_t*, float*);
BlockDequantizer dequantizer_of(GgufType type) {
  switch (type) {
    case GgufType::F32: return f32;
    case GgufType::F16: return f16;
    case GgufType::BF16: return bf16;
    case GgufType::Q4_0: return q4_0;
    case GgufType::Q4_1: return q4_1;
    case GgufType::Q5_0: return q5_0;
    case GgufType::Q5_1: return q5_1;
    case GgufType::Q8_0: return q8_0;
    case GgufType::IQ4_NL: return iq4_nl;
    case GgufType::Q2_K: return [](const uint8_t* x, float* y) { dequantize_k_block(QuantFormat::q2_k, x, y); };
    case GgufType::Q3_K: return [](const uint8_t* x, float* y) { dequantize_k_block(QuantFormat::q3_k, x, y); };
    case GgufType::Q4_K: return [](const uint8_t* x, float* y) { dequantize_k_block(QuantFormat::q4_k, x, y); };
    case GgufType::Q5_K: return [](const uint8_t* x, float* y) { dequantize_k_block(QuantFormat::q5_k, x, y); };
    case GgufType::Q6_K: return [](const uint8_t* x, float* y) { dequantize_k_block(QuantFormat::q6_k, x, y); };
    case GgufType::IQ4_XS: return [](const uint8_t* x, float* y) { dequantize_k_block(QuantFormat::iq4_xs, x, y); };
    default: return nullptr;
  }
}

}  // namespace

std::optional<QuantFormat> k_quant_format(GgufType type) {
  switch (type) {
    case GgufType::Q2_K: return QuantFormat::q2_k;
    case GgufType::Q3_K: return QuantFormat::q3_k;
    case GgufType::Q4_K: return QuantFormat::q4_k;
    case GgufType::Q5_K: return QuantFormat::q5_k;
    case GgufType::Q6_K: return QuantFormat::q6_k;
    case GgufType::IQ4_XS: return QuantFormat::iq4_xs;
    default: return std::nullopt;
  }
}

std::optional<QuantFormat> gguf_kiln_format(GgufType type) {
  switch (type) {
    case GgufType::Q8_0: return QuantFormat::int8_block;
    case GgufType::Q4_0: return QuantFormat::int4;
    case GgufType::IQ4_NL: return QuantFormat::iq4_nl;
    case GgufType::Q4_1: return QuantFormat::q4_1;
    case GgufType::Q5_0: return QuantFormat::q5_0;
    case GgufType::Q5_1: return QuantFormat::q5_1;
    default: return k_quant_format(type);
  }
}

bool gguf_maps_to_kiln_quantized(GgufType type) { return gguf_kiln_format(type).has_value(); }

QuantizedMatrix gguf_to_quantized(GgufType type, const Tensor& blocks, int64_t rows, int64_t cols, DType dtype) {
  const GgufTypeInfo& info = gguf_type_info(uint32_t(type));
  KILN_CHECK(gguf_maps_to_kiln_quantized(type) && cols % info.block_elements == 0 && blocks.dtype() == DType::u8 &&
                 blocks.numel() == rows * (cols / info.block_elements) * info.block_bytes,
             "GGUF: a ", info.name, " tensor of ", cols, " columns has no Kiln quantized form");
  QuantizedMatrix q;
  q.rows = rows;
  q.cols = cols;
  q.dtype = dtype;
  if (const auto k = k_quant_format(type)) {  // the file's blocks, as they are
    q.format = *k;
    q.data = blocks;
    return q;
  }
  MemoryCategoryScope weights(MemoryCategory::weights);
  // The levels as ggml lays them out (Q8_0's bytes; Q4_0's, IQ4_NL's and Q4_1's nibbles; Q5_0's and Q5_1's nibbles,
  // then their fifth bits), the f16 scale (and Q4_1's and Q5_1's minimum) beside them in f32.
  const bool with_min = type == GgufType::Q4_1 || type == GgufType::Q5_1;
  q.format = *gguf_kiln_format(type);
  const int64_t per_row = q.blocks();
  const int64_t level_bytes =
      q.five_bit() ? kFiveBitBlockBytes : q.format == QuantFormat::int8_block ? kQuantBlock : kQuantBlock / 2;
  q.data = Tensor::empty({rows, per_row * level_bytes}, DType::u8);
  q.scales = Tensor::empty({rows, per_row}, DType::f32);
  if (with_min) q.mins = Tensor::empty({rows, per_row}, DType::f32);
  uint8_t* data = q.data.data<uint8_t>();
  float* scales = q.scales.data<float>();
  const uint8_t* in = blocks.data<uint8_t>();
  for (int64_t b = 0; b < rows * per_row; ++b) {  // each block: the f16 scale (and minimum), then the levels
    const uint8_t* block = in + b * info.block_bytes;
    uint8_t* levels = data + b * level_bytes;
    scales[b] = half_at(block);
    if (with_min) q.mins.data<float>()[b] = half_at(block + 2);
    const uint8_t* body = block + (with_min ? 4 : 2);
    if (q.five_bit()) {  // ggml: qh[4] then qs[16]; Kiln: the nibbles first, as int4's
      std::memcpy(levels, body + 4, 16);
      std::memcpy(levels + 16, body, 4);
    } else {
      std::memcpy(levels, body, size_t(level_bytes));
    }
  }
  return q;
}

void gguf_dequantize(GgufType type, const uint8_t* blocks, int64_t count, float* out) {
  const BlockDequantizer block = dequantizer_of(type);
  const GgufTypeInfo& info = gguf_type_info(uint32_t(type));
  KILN_CHECK(block, "GGUF: Kiln does not read ", info.name, " tensors");
  KILN_CHECK(count % info.block_elements == 0, "GGUF: ", count, " values are not whole ", info.name, " blocks");
  for (int64_t i = 0; i < count / info.block_elements; ++i)
    block(blocks + i * info.block_bytes, out + i * info.block_elements);
}

}  // namespace kiln
