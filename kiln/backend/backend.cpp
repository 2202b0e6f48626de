#include "kiln/backend/backend.h"

namespace kiln {

void Backend::matmul_and_row_sums(const Tensor& a, const Tensor& b, Tensor& out, Tensor& row_sums) {
  KILN_CHECK(a.dim() == 2 && row_sums.dim() == 1 && row_sums.size(0) == a.size(0) && row_sums.is_contiguous(),
             "matmul_and_row_sums: expected a [M, K] and contiguous row_sums [M], got ", shape_str(a.shape()), " and ",
             shape_str(row_sums.shape()));
  matmul(a, b, out, MatmulArgs{});
  sum_rows(a, row_sums);
}

void Backend::sum_rows(const Tensor& a, Tensor& row_sums) {
  const int64_t M = a.size(0), K = a.size(1);
  Tensor columns = a.as_strided({K, M}, {a.stride(1), a.stride(0)}, a.offset());
  Tensor sums = row_sums.as_strided({1, M}, {M, 1}, row_sums.offset());
  reduce(ReduceOp::sum, columns, sums);
}

// Quantized weights are optional: a backend without them says so at the call.
void Backend::quantized_matmul(const Tensor&, const QuantizedMatrix& w, Tensor&) {
  KILN_FAIL("quantized weights (", quant_format_name(w.format), ") have no matrix product on the ", name(),
            " backend yet; run quantized models on the CPU (--device cpu), or without --quantize");
}
void Backend::quantized_embedding(const QuantizedMatrix& w, const Tensor&, Tensor&) {
  KILN_FAIL("quantized weights (", quant_format_name(w.format), ") have no lookup on the ", name(),
            " backend yet; run quantized models on the CPU (--device cpu), or without --quantize");
}

}  // namespace kiln
