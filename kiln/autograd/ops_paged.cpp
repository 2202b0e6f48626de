// The paged KV cache's two ops. They are for inference: a cache is written
// and read under no_grad, so neither records a node.
#include "kiln/autograd/ops.h"
#include "kiln/autograd/record.h"

namespace kiln {

Tensor paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const Tensor& tables,
                       const Tensor& spans, double scale, double softcap) {
  KILN_CHECK(!(grad_enabled() && q.requires_grad()), "paged attention is for inference: run it under no_grad");
  Tensor qc = contiguous(q);
  Tensor out = detail::new_tensor(qc.shape(), qc.dtype(), qc.device());
  detail::backend_of(qc).paged_attention(qc, k_pages, v_pages, tables, spans, out, float(scale), float(softcap));
  return out;
}

void scatter_rows_(Tensor& dst, const Tensor& offsets, int64_t column_stride, const Tensor& src) {
  KILN_CHECK(!(grad_enabled() && src.requires_grad()), "scatter_rows_ is for inference: run it under no_grad");
  const Tensor from = src.dtype() == dst.dtype() ? contiguous(src) : to_dtype(src, dst.dtype());
  detail::backend_of(dst).scatter_rows(from, offsets, column_stride, dst);
}

}  // namespace kiln
