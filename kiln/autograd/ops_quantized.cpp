// Quantized weights in the op set: each call converts its input to the f32
// rows the backend's integer kernels take and its answer back to the dtype
// the weights were quantized from, so a bf16 model quantized stays a bf16
// model to every other op.
#include "kiln/autograd/ops.h"
#include "kiln/autograd/record.h"

namespace kiln {

Tensor quantized_linear(const Tensor& x, const QuantizedMatrix& w, const Tensor& bias) {
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == w.cols, "quantized linear: input ", shape_str(x.shape()),
             " does not end in the weights' ", w.cols, " features");
  KILN_CHECK(!(grad_enabled() && x.requires_grad()),
             "quantized weights are for inference: no gradient flows through them (train without --quantize)");
  KILN_CHECK(x.device() == w.device(), "quantized linear: input on ", x.device().str(), ", weights on ",
             w.device().str());
  NoGradGuard values_only;
  const int64_t rows = x.numel() / w.cols;
  const Tensor x2 = reshape(x.dtype() == DType::f32 ? contiguous(x) : to_dtype(x, DType::f32), {rows, w.cols});
  Tensor y = detail::new_tensor({rows, w.rows}, DType::f32, x.device());
  detail::backend_of(x).quantized_matmul(x2, w, y);
  if (bias.defined()) y = add(y, bias.dtype() == DType::f32 ? bias : to_dtype(bias, DType::f32));
  Shape shape = x.shape();
  shape.back() = w.rows;
  y = reshape(y, shape);
  return w.dtype == DType::f32 ? y : to_dtype(y, w.dtype);
}

Tensor quantized_embedding(const QuantizedMatrix& w, const Tensor& ids) {
  KILN_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32, "embedding: ids must be i32 or i64");
  NoGradGuard values_only;
  Shape shape = ids.shape();
  shape.push_back(w.cols);
  Tensor out = detail::new_tensor(shape, DType::f32, w.device());
  detail::backend_of(out).quantized_embedding(w, contiguous(ids), out);
  return w.dtype == DType::f32 ? out : to_dtype(out, w.dtype);
}

}  // namespace kiln
