// Decoding's product with an int4 (Q4_0), iq4_nl or int8b (Q8_0) matrix
// whose rows are in groups of kRowGroup (kiln/core/quantized.h): the group's
// eight rows' block b lie side by side, so one pass over the group reads a
// single stream and each activation load, scale and conversion serves two,
// four or eight rows.
#pragma once
#include "kiln/core/quantized.h"
#include "kiln/cpu/quantized_activations.h"
#include "kiln/cpu/quantized_matmul.h"

namespace kiln::cpu {

// out[m * w.rows + n] for rows n0 .. n1 of w (whole groups: n0 and n1
// multiples of kRowGroup, n1 at most w.grouped_row_end()) against the M rows
// of `a` (quantized as the row kernel quantizes it for the format). The bits
// are the row kernel's (quantized_matmul.cpp) on the same rows in order:
// each block's integer lanes add into the chain that kernel adds them to,
// and the chains meet in its order.
void row_group_products(QuantDot dot, const QuantizedMatrix& w, int64_t n0, int64_t n1, const QuantizedActivations& a,
                        int64_t M, float* out);

}  // namespace kiln::cpu
