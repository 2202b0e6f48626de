// Quantized weights in the op set: each call converts its input to the f32
// rows the backend's integer kernels take and its answer back to the dtype
// the weights were quantized from, so a bf16 model quantized stays a bf16
// model to every other op. The weights are frozen; a gradient flows to the
// input (LoRA on a quantized base), through the dequantized matrix a block
// of rows at a time.
#include <algorithm>

#include "kiln/autograd/ops.h"
#include "kiln/autograd/record.h"

namespace kiln {
namespace {

// dx [rows, w.cols] = g [rows, w.rows] W: W's rows dequantized (on the host,
// where quantized weights live) kRowsAtOnce at a time, so the float matrix never
// exists whole.
Tensor quantized_input_gradient(const Tensor& g, const QuantizedMatrix& w) {
  constexpr int64_t kRowsAtOnce = 256;
  NoGradGuard values_only;
  const Tensor g32 = g.dtype() == DType::f32 ? contiguous(g) : to_dtype(g, DType::f32);
  Tensor dx;
  std::vector<float> block;
  for (int64_t first = 0; first < w.rows; first += kRowsAtOnce) {
    const int64_t n = std::min(kRowsAtOnce, w.rows - first);
    block.resize(size_t(n * w.cols));
    for (int64_t r = 0; r < n; ++r) dequantize_row(w, first + r, block.data() + r * w.cols);
    const Tensor part = matmul(contiguous(slice(g32, 1, first, first + n)),
                               Tensor::from_vector(block, {n, w.cols}).to(g.device()));
    dx = dx.defined() ? add(dx, part) : part;
  }
  return dx;
}

}  // namespace

Tensor quantized_linear(const Tensor& x, const QuantizedMatrix& w, const Tensor& bias) {
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == w.cols, "quantized linear: input ", shape_str(x.shape()),
             " does not end in the weights' ", w.cols, " features");
  KILN_CHECK(x.device() == w.device(), "quantized linear: input on ", x.device().str(), ", weights on ",
             w.device().str());
  KILN_CHECK(!bias.defined() || !(grad_enabled() && bias.requires_grad()),
             "quantized linear: a quantized layer's bias is frozen with its weights");
  Tensor y;
  {
    NoGradGuard values_only;
    const int64_t rows = x.numel() / w.cols;
    const Tensor x2 = reshape(x.dtype() == DType::f32 ? contiguous(x) : to_dtype(x, DType::f32), {rows, w.cols});
    y = detail::new_tensor({rows, w.rows}, DType::f32, x.device());
    detail::backend_of(x).quantized_matmul(x2, w, y);
    if (bias.defined()) y = add(y, bias.dtype() == DType::f32 ? bias : to_dtype(bias, DType::f32));
    Shape shape = x.shape();
    shape.back() = w.rows;
    y = reshape(y, shape);
    y = w.dtype == DType::f32 ? y : to_dtype(y, w.dtype);
  }
  // The node keeps a pointer to `w`: its owner (the layer) outlives the step's graph.
  record(y, "QuantizedLinearBackward", {&x}, [w = &w, xs = x.shape(), dtype = x.dtype()](const Tensor& g) {
    Tensor dx = reshape(quantized_input_gradient(reshape(g, {g.numel() / w->rows, w->rows}), *w), xs);
    return std::vector<Tensor>{dx.dtype() == dtype ? dx : to_dtype(dx, dtype)};
  });
  return y;
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
