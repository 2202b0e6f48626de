#include "kiln/backend/backend.h"

namespace kiln {

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
