#include "kiln/nn/layers.h"

#include <cmath>

namespace kiln::nn {

// kaiming_uniform(a=sqrt(5)) as torch.nn.Linear/Conv2d: bound = 1/sqrt(fan_in)
// for the weight and the bias alike.
Linear::Linear(int64_t in, int64_t out, Generator& gen, bool with_bias) {
  double bound = 1.0 / std::sqrt(double(in));
  weight = register_parameter("weight", uniform_tensor({out, in}, bound, gen));
  if (with_bias) bias = register_parameter("bias", uniform_tensor({out}, bound, gen));
}

Embedding::Embedding(int64_t num, int64_t dim, Generator& gen, double stddev) {
  weight = register_parameter("weight", normal_tensor({num, dim}, stddev, gen));
}

namespace {
std::shared_ptr<const QuantizedMatrix> quantized_copy(const Tensor& w, QuantFormat format) {
  KILN_CHECK(w.dim() == 2, "quantize: weights must be a matrix, got ", shape_str(w.shape()));
  KILN_CHECK(w.device().is_cpu(), "quantize: quantized weights run on the CPU; these are on ", w.device().str());
  NoGradGuard values_only;
  const Tensor f32 = contiguous(w.dtype() == DType::f32 ? w : to_dtype(w, DType::f32));
  return std::make_shared<const QuantizedMatrix>(
      quantize_matrix(f32.data<float>(), w.size(0), w.size(1), format, w.dtype()));
}
}  // namespace

void WeightModule::quantize(QuantFormat format) {
  if (!quantized) set_quantized(quantized_copy(weight, format));
}

void WeightModule::set_quantized(std::shared_ptr<const QuantizedMatrix> q) {
  if (weight.defined())
    KILN_CHECK(q->rows == weight.size(0) && q->cols == weight.size(1), "quantized weights [", q->rows, ", ", q->cols,
               "] do not fit a weight of shape ", shape_str(weight.shape()));
  quantized = std::move(q);
  drop_parameter("weight");
  weight = Tensor();
}

size_t quantize_weights(Module& root, QuantFormat format) {
  size_t bytes = 0;
  root.for_each_module([&](const std::string&, Module& m) {
    if (auto* w = dynamic_cast<WeightModule*>(&m)) {
      w->quantize(format);
      bytes += w->quantized->bytes();
    }
  });
  return bytes;
}

Tensor linear_or_quantized(const Tensor& x, const Tensor& weight, const std::shared_ptr<const QuantizedMatrix>& q) {
  return q ? quantized_linear(x, *q, Tensor()) : linear(x, weight, Tensor());
}

LayerNorm::LayerNorm(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", ones({dim}));
  bias = register_parameter("bias", zeros({dim}));
}

Conv2d::Conv2d(int64_t in, int64_t out, int64_t kernel, Generator& gen, int64_t stride, int64_t padding,
               bool with_bias)
    : stride_(stride), padding_(padding) {
  double bound = 1.0 / std::sqrt(double(in * kernel * kernel));
  weight = register_parameter("weight", uniform_tensor({out, in, kernel, kernel}, bound, gen));
  if (with_bias) bias = register_parameter("bias", uniform_tensor({out}, bound, gen));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h);
  return h;
}

}  // namespace kiln::nn
