#include "kiln/core/quantized.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <vector>

#include "kiln/core/quantized_k.h"

namespace kiln {

const char* quant_format_name(QuantFormat f) {
  switch (f) {
    case QuantFormat::int8: return "int8";
    case QuantFormat::int4: return "int4";
    case QuantFormat::int4_zero: return "int4z";
    case QuantFormat::int8_block: return "int8b";
    case QuantFormat::q4_1: return "q4_1";
    case QuantFormat::q5_0: return "q5_0";
    case QuantFormat::q5_1: return "q5_1";
    case QuantFormat::f16: return "f16";
    case QuantFormat::iq4_nl: return "iq4_nl";
    case QuantFormat::q2_k: return "q2_k";
    case QuantFormat::q3_k: return "q3_k";
    case QuantFormat::q4_k: return "q4_k";
    case QuantFormat::q5_k: return "q5_k";
    case QuantFormat::q6_k: return "q6_k";
    case QuantFormat::iq4_xs: return "iq4_xs";
  }
  return "?";
}

constexpr QuantFormat kFormats[] = {QuantFormat::int8, QuantFormat::int4, QuantFormat::int4_zero,
                                    QuantFormat::int8_block};

std::vector<std::string> quant_format_names() {
  std::vector<std::string> names;
  for (QuantFormat f : kFormats) names.push_back(quant_format_name(f));
  return names;
}

QuantFormat parse_quant_format(const std::string& name) {
  for (QuantFormat f : kFormats)
    if (name == quant_format_name(f)) return f;
  KILN_FAIL("unknown quantization '", name, "': int8 (per output channel), int4 (groups of 32, symmetric) or "
            "int4z (groups of 32 with a zero point) or int8b (groups of 32: GGUF's Q8_0)");
}

size_t QuantizedMatrix::bytes() const {
  size_t n = 0;
  for (const Tensor* t : {&data, &scales, &zeros, &mins})
    if (t->defined()) n += size_t(t->numel()) * dtype_size(t->dtype());
  return n;
}

size_t quantized_bytes(QuantFormat format, int64_t rows, int64_t cols) {
  const int64_t blocks = (cols + kQuantBlock - 1) / kQuantBlock, padded = blocks * kQuantBlock;
  switch (format) {
    case QuantFormat::int8: return size_t(rows * padded + rows * 4);
    case QuantFormat::int4:
    case QuantFormat::iq4_nl: return size_t(rows * padded / 2 + rows * blocks * 4);
    case QuantFormat::int4_zero: return size_t(rows * padded / 2 + rows * blocks * 5);
    case QuantFormat::int8_block: return size_t(rows * padded + rows * blocks * 4);
    case QuantFormat::q4_1: return size_t(rows * padded / 2 + rows * blocks * 8);
    case QuantFormat::q5_0: return size_t(rows * blocks * (kFiveBitBlockBytes + 4));
    case QuantFormat::q5_1: return size_t(rows * blocks * (kFiveBitBlockBytes + 8));
    case QuantFormat::f16: return size_t(rows * cols * 2);
    case QuantFormat::q2_k:
    case QuantFormat::q3_k:
    case QuantFormat::q4_k:
    case QuantFormat::q5_k:
    case QuantFormat::q6_k:
    case QuantFormat::iq4_xs: return size_t(rows * ((cols + kSuperBlock - 1) / kSuperBlock) * k_block_bytes(format));
  }
  return 0;
}

QuantizedMatrix quantize_matrix(const float* values, int64_t rows, int64_t cols, QuantFormat format, DType dtype) {
  KILN_CHECK(rows > 0 && cols > 0, "quantize: an empty matrix [", rows, ", ", cols, "]");
  KILN_CHECK(std::find(std::begin(kFormats), std::end(kFormats), format) != std::end(kFormats), "quantize: Kiln reads ",
             quant_format_name(format), " from GGUF files but does not quantize to it (llama-quantize does)");
  MemoryCategoryScope weights(MemoryCategory::weights);
  QuantizedMatrix q;
  q.format = format;
  q.rows = rows;
  q.cols = cols;
  q.dtype = dtype;
  const int64_t padded = q.padded_cols(), blocks = q.blocks();
  auto at = [&](int64_t r, int64_t c) { return c < cols ? values[r * cols + c] : 0.0f; };
  if (q.eight_bit()) {  // a scale per row (int8) or per group of 32 (int8b): max |w| / 127
    const int64_t group = format == QuantFormat::int8 ? padded : kQuantBlock;
    q.data = Tensor::empty({rows, padded}, DType::u8);
    q.scales = format == QuantFormat::int8 ? Tensor::empty({rows}, DType::f32) : Tensor::empty({rows, blocks}, DType::f32);
    auto* data = q.data.data<uint8_t>();
    auto* scales = q.scales.data<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g0 = 0; g0 < padded; g0 += group) {
        float amax = 0;
        for (int64_t c = g0; c < g0 + group; ++c) amax = std::max(amax, std::abs(at(r, c)));
        const float scale = amax / 127.0f, inverse = scale > 0 ? 1.0f / scale : 0.0f;
        scales[r * (padded / group) + g0 / group] = scale;
        for (int64_t c = g0; c < g0 + group; ++c)
          data[r * padded + c] = uint8_t(int8_t(std::clamp(std::nearbyint(at(r, c) * inverse), -127.0f, 127.0f)));
      }
    return q;
  }
  const bool zero_point = format == QuantFormat::int4_zero;
  q.data = Tensor::empty({rows, padded / 2}, DType::u8);
  q.scales = Tensor::empty({rows, blocks}, DType::f32);
  if (zero_point) q.zeros = Tensor::empty({rows, blocks}, DType::u8);
  auto* data = q.data.data<uint8_t>();
  auto* scales = q.scales.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      float lo = 0, hi = 0, amax = 0, signed_max = 0;
      for (int64_t j = 0; j < kQuantBlock; ++j) {
        const float v = at(r, b * kQuantBlock + j);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        if (std::abs(v) > amax) amax = std::abs(v), signed_max = v;
      }
      float scale;
      int zero;
      if (zero_point) {  // [lo, hi] (holding 0) onto [0, 15]
        scale = (hi - lo) / 15.0f;
        zero = scale > 0 ? int(std::clamp(std::nearbyint(-lo / scale), 0.0f, 15.0f)) : 0;
        q.zeros.data<uint8_t>()[r * blocks + b] = uint8_t(zero);
      } else {  // Q4_0: the value of largest magnitude maps to -8, so 8 levels lie on its side
        scale = signed_max / -8.0f;
        zero = 8;
      }
      scales[r * blocks + b] = scale;
      const float inverse = scale != 0 ? 1.0f / scale : 0.0f;
      uint8_t* out = data + r * (padded / 2) + b * (kQuantBlock / 2);
      for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
        auto level = [&](int64_t c) {
          return uint8_t(std::clamp(std::nearbyint(at(r, b * kQuantBlock + c) * inverse) + float(zero), 0.0f, 15.0f));
        };
        out[j] = uint8_t(level(j) | (level(j + kQuantBlock / 2) << 4));
      }
    }
  return q;
}

QuantizedMatrix half_matrix(const Tensor& values, DType dtype) {
  KILN_CHECK(values.dtype() == DType::f16 && values.dim() == 2 && values.is_contiguous() && values.device().is_cpu(),
             "half_matrix: takes a contiguous f16 matrix on the CPU, got ", dtype_name(values.dtype()), " ",
             shape_str(values.shape()));
  QuantizedMatrix q;
  q.format = QuantFormat::f16;
  q.rows = values.size(0);
  q.cols = values.size(1);
  q.dtype = dtype;
  q.data = values;
  return q;
}

namespace {

// `q` with its rows in groups or in order: its blocks and scales moved to where the other layout's block_index
// puts them.
QuantizedMatrix regrouped(const QuantizedMatrix& q, bool grouped) {
  KILN_CHECK(can_group_rows(q.format), "group_rows: ", quant_format_name(q.format),
             " matrices keep their rows in order (decoding reads int4's, iq4_nl's, int8b's, q4_k's,",
             " q5_k's, q6_k's and iq4_xs's alone in groups)");
  if (q.grouped_rows == grouped) return q;
  MemoryCategoryScope weights(MemoryCategory::weights);
  QuantizedMatrix out = q;
  out.grouped_rows = grouped;
  if (q.k_quant()) {  // each row's blocks moved to or from its group's (quantized_k.h)
    KILN_CHECK(q.data.is_contiguous() && q.data.device().is_cpu(),
               "group_rows: the matrix must be contiguous, on the CPU");
    out.data = Tensor::empty(q.data.shape(), DType::u8);
    const int64_t blocks = q.cols / kSuperBlock, block_bytes = k_block_bytes(q.format);
    const int64_t row_bytes = blocks * block_bytes, group_bytes = k_group_bytes(q.format);
    const uint8_t* from = q.data.data<uint8_t>();
    uint8_t* to = out.data.data<uint8_t>();
    const int64_t group_end = std::max(q.grouped_row_end(), out.grouped_row_end());
    for (int64_t r = 0; r < group_end; ++r)
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t in_group = (r / kRowGroup * blocks + b) * group_bytes;
        const int64_t in_row = r * row_bytes + b * block_bytes;
        if (grouped) place_in_k_group(q.format, from + in_row, r % kRowGroup, to + in_group);
        else take_from_k_group(q.format, from + in_group, r % kRowGroup, to + in_row);
      }
    std::memcpy(to + group_end * row_bytes, from + group_end * row_bytes, size_t((q.rows - group_end) * row_bytes));
    return out;
  }
  const std::pair<const Tensor*, Tensor*> tensors[] = {{&q.data, &out.data}, {&q.scales, &out.scales}};
  for (auto [from, to] : tensors) {
    KILN_CHECK(from->is_contiguous() && from->device().is_cpu(),
               "group_rows: the matrix must be contiguous, on the CPU");
    const size_t unit = from->nbytes() / size_t(q.rows * q.blocks());
    *to = Tensor::empty(from->shape(), from->dtype());
    const auto* in = static_cast<const uint8_t*>(from->data_ptr());
    auto* moved = static_cast<uint8_t*>(to->data_ptr());
    for (int64_t r = 0; r < q.rows; ++r)
      for (int64_t b = 0; b < q.blocks(); ++b)
        std::memcpy(moved + size_t(out.block_index(r, b)) * unit, in + size_t(q.block_index(r, b)) * unit, unit);
  }
  return out;
}

}  // namespace

QuantizedMatrix group_rows(const QuantizedMatrix& q) { return regrouped(q, true); }
QuantizedMatrix ungroup_rows(const QuantizedMatrix& q) { return regrouped(q, false); }

void dequantize_row(const QuantizedMatrix& q, int64_t row, float* out) {
  KILN_CHECK(q.data.device().is_cpu(), "dequantize_row: the matrix is on ", q.data.device().str());
  if (q.half()) {
    const auto* data = static_cast<const uint16_t*>(q.data.data_ptr()) + row * q.cols;
    for (int64_t c = 0; c < q.cols; ++c) out[c] = f16_to_float(data[c]);
    return;
  }
  const int64_t padded = q.padded_cols();
  if (q.k_quant()) {
    uint8_t scratch[kMaxKBlockBytes];
    for (int64_t b = 0; b < q.cols / kSuperBlock; ++b)
      dequantize_k_block(q.format, k_block_of_row(q, row, b, scratch), out + b * kSuperBlock);
    return;
  }
  if (q.format == QuantFormat::int8) {
    const auto* data = q.data.data<uint8_t>() + row * padded;
    const float scale = q.scales.data<float>()[row];
    for (int64_t c = 0; c < q.cols; ++c) out[c] = scale * float(int8_t(data[c]));
    return;
  }
  const int64_t block_bytes = q.eight_bit() ? kQuantBlock : q.five_bit() ? kFiveBitBlockBytes : kQuantBlock / 2;
  const float* scales = q.scales.data<float>();
  const uint8_t* zeros = q.zeros.defined() ? q.zeros.data<uint8_t>() : nullptr;
  const float* mins = q.mins.defined() ? q.mins.data<float>() : nullptr;
  const float fixed_zero = mins || q.lookup() ? 0 : q.five_bit() ? 16 : 8;  // (q4_1, q5_1: none; q5_0's 16, int4's 8)
  const int64_t first = q.block_index(row), step = q.block_step(row);
  for (int64_t b = 0; b < q.blocks(); ++b) {
    const int64_t at = first + b * step;
    const uint8_t* block = q.data.data<uint8_t>() + at * block_bytes;
    float values[kQuantBlock];
    if (q.eight_bit()) {
      for (int64_t j = 0; j < kQuantBlock; ++j) values[j] = scales[at] * float(int8_t(block[j]));
    } else {
      uint8_t levels[kQuantBlock];
      unpack_levels(block, q.five_bit(), levels);
      const float scale = scales[at], zero = zeros ? float(zeros[at]) : fixed_zero;
      for (int64_t j = 0; j < kQuantBlock; ++j)
        values[j] = scale * (q.lookup() ? float(kIq4nlValues[levels[j]]) : float(levels[j]) - zero);
    }
    if (mins)
      for (float& v : values) v += mins[at];
    const int64_t n = std::min(kQuantBlock, q.cols - b * kQuantBlock);
    std::copy(values, values + n, out + b * kQuantBlock);
  }
}

}  // namespace kiln
