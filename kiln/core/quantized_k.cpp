#include "kiln/core/quantized_k.h"

#include <cstring>
#include <utility>

#include "kiln/core/error.h"

namespace kiln {

namespace {

// Block layouts (ggml-common.h): Q2_K {scales[16] (scale | min << 4), qs[64], d, dmin};
// Q3_K {hmask[32], qs[64], scales[12], d}; Q4_K {d, dmin, scales[12], qs[128]};
// Q5_K {d, dmin, scales[12], qh[32], qs[128]}; Q6_K {ql[128], qh[64], scales[16], d}.
// Q2_K and Q3_K: 2-bit levels, value j of each 128 at bit 2 (j / 32 % 4) of
// byte j % 32 (Q3_K's third bit: bit j / 32 of hmask[j % 32], set meaning +4,
// the level then minus 4); one scale per 16 values.
void q2_k(const uint8_t* x, float* y) {
  const uint8_t* q = x + 16;
  const float d = half_at(x + 80), dmin = half_at(x + 82);
  for (int j = 0; j < kSuperBlock; ++j) {
    const uint8_t sc = x[j / 16];
    y[j] = d * float(sc & 0xf) * float((q[j / 128 * 32 + j % 32] >> (2 * (j / 32 % 4))) & 3) - dmin * float(sc >> 4);
  }
}

void q3_k(const uint8_t* x, float* y) {
  const uint8_t* hm = x;
  const uint8_t* q = x + 32;
  const float d = half_at(x + 108);
  int8_t scales[16];
  k3_scales(x + 96, scales);
  for (int j = 0; j < kSuperBlock; ++j) {
    const int low = (q[j / 128 * 32 + j % 32] >> (2 * (j / 32 % 4))) & 3, high = (hm[j % 32] >> (j / 32)) & 1;
    y[j] = d * float(scales[j / 16]) * float(low + 4 * high - 4);
  }
}

void q4_k(const uint8_t* x, float* y) {
  const float d = half_at(x), dmin = half_at(x + 2);
  uint8_t sc[8], m[8];
  k4_scales_mins(x + 4, sc, m);
  const uint8_t* q = x + 16;
  for (int j = 0; j < 4; ++j, q += 32) {
    for (int l = 0; l < 32; ++l) *y++ = d * float(sc[2 * j]) * float(q[l] & 0xf) - dmin * float(m[2 * j]);
    for (int l = 0; l < 32; ++l) *y++ = d * float(sc[2 * j + 1]) * float(q[l] >> 4) - dmin * float(m[2 * j + 1]);
  }
}

void q5_k(const uint8_t* x, float* y) {
  const float d = half_at(x), dmin = half_at(x + 2);
  uint8_t sc[8], m[8];
  k4_scales_mins(x + 4, sc, m);
  const uint8_t* qh = x + 16;
  const uint8_t* ql = x + 48;
  for (int j = 0; j < 4; ++j, ql += 32) {
    const uint8_t low_bit = uint8_t(1 << (2 * j)), high_bit = uint8_t(2 << (2 * j));
    for (int l = 0; l < 32; ++l)
      *y++ = d * float(sc[2 * j]) * float((ql[l] & 0xf) + (qh[l] & low_bit ? 16 : 0)) - dmin * float(m[2 * j]);
    for (int l = 0; l < 32; ++l)
      *y++ = d * float(sc[2 * j + 1]) * float((ql[l] >> 4) + (qh[l] & high_bit ? 16 : 0)) - dmin * float(m[2 * j + 1]);
  }
}

void q6_k(const uint8_t* x, float* y) {
  const uint8_t* ql = x;
  const uint8_t* qh = x + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(x + 192);
  const float d = half_at(x + 208);
  for (int n = 0; n < 2; ++n, y += 128, ql += 64, qh += 32, sc += 8)
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      y[l] = d * float(sc[is]) * float(((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32);
      y[l + 32] = d * float(sc[is + 2]) * float(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
      y[l + 64] = d * float(sc[is + 4]) * float(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      y[l + 96] = d * float(sc[is + 6]) * float(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
}

// IQ4_XS {d, scales_h, scales_l[4], qs[128]}: eight sub-blocks of 32, each
// 16 bytes of int4's packing (value j low, j + 16 high) through kIq4nlValues.
void iq4_xs(const uint8_t* x, float* y) {
  const float d = half_at(x);
  int8_t scales[8];
  iq4_xs_scales(x, scales);
  const uint8_t* q = x + 8;
  for (int i = 0; i < 8; ++i, q += 16, y += 32) {
    const float dl = d * float(scales[i]);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * float(kIq4nlValues[q[j] & 0xf]);
      y[j + 16] = dl * float(kIq4nlValues[q[j] >> 4]);
    }
  }
}

// Moves one row's block between the layouts, piece by piece; `ToGroup` says which way. (Each piece known at
// compile time, each copy is one move: the prompt GEMM gathers every grouped row's blocks this way.)
template <QuantFormat F, bool ToGroup, size_t P>
void move_piece(const uint8_t* from, int64_t row, uint8_t* to) {
  constexpr KGroupPiece piece = kKGroupLayout<F>[P];
  constexpr int64_t at = k_group_piece_at<F>(P);
  for (int64_t u = 0; u < piece.bytes / piece.unit; ++u) {
    const int64_t in_row = piece.begin + u * piece.unit, in_group = at + (u * kRowGroup + row) * piece.unit;
    std::memcpy(to + (ToGroup ? in_group : in_row), from + (ToGroup ? in_row : in_group), size_t(piece.unit));
  }
}
template <bool ToGroup>
void move_k_block(QuantFormat format, const uint8_t* from, int64_t row, uint8_t* to) {
  with_k_quant(format, [&]<QuantFormat F>() {
    [&]<size_t... P>(std::index_sequence<P...>) {
      (move_piece<F, ToGroup, P>(from, row, to), ...);
    }(std::make_index_sequence<kKGroupLayout<F>.size()>());
  });
}

}  // namespace

void place_in_k_group(QuantFormat format, const uint8_t* block, int64_t row, uint8_t* group) {
  move_k_block<true>(format, block, row, group);
}
void take_from_k_group(QuantFormat format, const uint8_t* group, int64_t row, uint8_t* block) {
  move_k_block<false>(format, group, row, block);
}

const uint8_t* k_block_of_row(const QuantizedMatrix& q, int64_t row, int64_t b, uint8_t* scratch) {
  const int64_t blocks = q.cols / kSuperBlock;
  const uint8_t* data = q.data.data<uint8_t>();
  if (row >= q.grouped_row_end()) return data + (row * blocks + b) * k_block_bytes(q.format);
  take_from_k_group(q.format, data + (row / kRowGroup * blocks + b) * k_group_bytes(q.format), row % kRowGroup,
                    scratch);
  return scratch;
}

void dequantize_k_block(QuantFormat format, const uint8_t* block, float* out) {
  switch (format) {
    case QuantFormat::q2_k: return q2_k(block, out);
    case QuantFormat::q3_k: return q3_k(block, out);
    case QuantFormat::q4_k: return q4_k(block, out);
    case QuantFormat::q5_k: return q5_k(block, out);
    case QuantFormat::q6_k: return q6_k(block, out);
    case QuantFormat::iq4_xs: return iq4_xs(block, out);
    default: KILN_FAIL("quantized format ", quant_format_name(format), " is not a K-quant");
  }
}

}  // namespace kiln
