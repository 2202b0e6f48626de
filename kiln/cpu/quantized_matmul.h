// Products with quantized weights (kiln/core/quantized.h) on the CPU, for
// inference. Exposed beside the backend so the tests can run each
// instruction path on whatever machine runs them.
#pragma once
#include <algorithm>

#include "kiln/backend/backend.h"
#include "kiln/core/quantized.h"
#include "kiln/cpu/spin_pool.h"  // for_row_chunks

namespace kiln::cpu {

// The integer dot products: AVX-512 VNNI's vpdpbusd, AVX2's
// vpmaddubsw + vpmaddwd, or plain C++ (the reference the tests hold the
// other two to, bit for bit).
enum class QuantDot { scalar, avx2, avx512_vnni };
// The path the backend takes on this CPU under KILN_MAX_ISA.
QuantDot quant_dot_in_use();
const char* quant_dot_name(QuantDot dot);

// out [M, N] f32 = x [M, K] f32 (contiguous) times w^T, w [N, K]: each row of
// x quantized to int8 per block of 32 (ggml's Q8_0), integer products per
// block, f32 sums in a fixed order (the result does not depend on the thread
// count or the path). f16 weights take few_rows_times_f16 instead (f32 sums
// of the widened weights).
void quantized_matmul_rows(const float* x, int64_t M, const QuantizedMatrix& w, float* out, QuantDot dot);

// One block of an activation row to int8 levels (scale max|x| / 127):
// `count` values of x, zeros after them up to the block's 32. Returns the
// levels' sum.
int32_t quantize_activation_block(const float* x, int64_t count, int8_t* q, float& scale);

// Below this many rows (decoding, a few streams) the kernel above runs;
// from it on, a prompt's GEMM (quantized_gemm.h), which unpacks each group
// of weight rows once per call. The crossover (`kiln_quant_bench 20 ROWS`,
// 1,536 x 576, one thread, Emerald Rapids): with VNNI the GEMM is 0.8-1.3x
// the row kernel at 4 rows, 1.2-1.8x at 6, 1.4-2.2x at 8; with AVX2
// 0.9-1.3x at 8 and 1.1-2.2x at 16.
constexpr int64_t gemm_rows(QuantDot dot) { return dot == QuantDot::avx512_vnni ? 6 : 16; }
// For `w` with rows in groups (row_group_product.h, kquant_row_group.h) the row kernel is faster, so the GEMM
// (which gathers each grouped K-quant row's blocks) overtakes it later, at rows measured per format
// (`kiln_quant_bench 20 ROWS`, OMP_NUM_THREADS=1, the Xeon with AMX; the GEMM against the row kernel):
//   int4: VNNI 0.6-0.8x at 16, 0.85-1.06x at 24;
//   iq4_nl, int8b: VNNI 1.04x and 0.97x at 16; with AVX2 (groups 1.1-1.35x faster) the GEMM's 16 stays;
//   q4_k: 0.89-0.90x at 16, 1.16-1.17x at 24 on both paths; q6_k: 0.74-0.77x at 8, 1.09-1.19x at 12;
//   q5_k: VNNI 0.94x at 12, 1.21x at 16; AVX2 0.77x at 8, 1.13x at 16;
//   iq4_xs: VNNI 0.80x at 6, 1.06-1.08x at 8; AVX2 0.78x at 8, 1.11x at 16;
//   q2_k: VNNI 0.90x at 12, 1.12x at 16; AVX2 0.60x at 12, 1.06x at 16; q3_k: VNNI 0.87x at 8, 1.39x at 12;
//   AVX2 0.67x at 8, 1.07x at 12.
struct GroupedCrossover {
  QuantFormat format;
  int64_t vnni, avx2;
};
inline constexpr GroupedCrossover kGroupedCrossovers[] = {
    {QuantFormat::int4, 24, 16}, {QuantFormat::iq4_nl, 16, 16}, {QuantFormat::int8_block, 16, 16},
    {QuantFormat::q2_k, 16, 16}, {QuantFormat::q3_k, 12, 12},   {QuantFormat::q4_k, 24, 24},
    {QuantFormat::q5_k, 16, 16}, {QuantFormat::q6_k, 12, 12},   {QuantFormat::iq4_xs, 8, 16}};
inline int64_t gemm_rows(QuantDot dot, const QuantizedMatrix& w) {
  if (w.grouped_rows)
    for (const GroupedCrossover& c : kGroupedCrossovers)
      if (c.format == w.format) return dot == QuantDot::avx512_vnni ? c.vnni : c.avx2;
  return gemm_rows(dot);
}

// The fixed order of the sum of a product's eight f32 lanes, on every path:
// lanes i and i + 4, then i and i + 2, then the two.
inline float sum_lanes(const float* a) {
  const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}


}  // namespace kiln::cpu
