// Decoding's product with a K-quant's rows in groups of eight (kiln/core/quantized_k.h's
// layout): one pass over a group reads a single stream, each register of
// levels holds a row in each 32-bit lane, and each activation load, scale
// conversion and multiply-add serves the eight rows.
#pragma once
#include <cstdint>

#include "kiln/core/quantized.h"

namespace kiln::cpu {

// out[0 .. 8) = the group's eight rows (their `blocks` blocks of 256 at
// `group`) times one activation row as Q8_K (its blocks' scales, 256 levels
// each and the sums of each 16), with the bits of kquant_matmul's row
// kernel on the same path: each row's integer lanes are that kernel's, and
// its f32 steps the same, a row to a lane. `vnni`: AVX-512 VNNI's vpdpwssd,
// else AVX2 (x86 builds only). `format`: a K-quant (q2_k .. iq4_xs).
void k_group_dot(QuantFormat format, bool vnni, const uint8_t* group, int64_t blocks, const float* act_scales,
                 const int8_t* act_levels, const int16_t* act_sums, float* out);

}  // namespace kiln::cpu
