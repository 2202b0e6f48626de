#include "kiln/nn/layers.h"

#include <cmath>

#include "kiln/backend/factory.h"

namespace kiln::nn {

// kaiming_uniform(a=sqrt(5)) as torch.nn.Linear/Conv2d: bound = 1/sqrt(fan_in)
// for the weight and the bias alike.
Linear::Linear(int64_t in, int64_t out, Generator& gen, bool with_bias) {
  double bound = 1.0 / std::sqrt(double(in));
  weight = register_parameter("weight", uniform_tensor({out, in}, bound, gen));
  if (with_bias) bias = register_parameter("bias", uniform_tensor({out}, bound, gen));
}

Tensor Linear::forward(const Tensor& x) {
  Tensor y = quantized ? quantized_linear(x, *quantized, bias) : linear(x, weight, bias);
  if (!lora_A) return y;
  const Tensor in = is_training() && lora_dropout > 0 ? dropout(x, lora_dropout, *lora_dropout_gen_) : x;
  return y + mul_scalar(lora_B->forward(lora_A->forward(in)), lora_scale);
}

void Linear::attach_lora(int64_t rank, double scale, double dropout_p, Generator& init,
                         std::shared_ptr<Generator> dropout_gen) {
  KILN_CHECK(!lora_A, "this linear layer already has a LoRA adapter");
  KILN_CHECK(weight.defined() || quantized, "LoRA needs the layer's weight");
  KILN_CHECK(rank >= 1, "the LoRA rank must be at least 1, got ", rank);
  KILN_CHECK(dropout_p >= 0 && dropout_p < 1, "the LoRA dropout must be in [0, 1), got ", dropout_p);
  KILN_CHECK(dropout_p == 0 || dropout_gen, "LoRA dropout needs a generator");
  // A quantized base (QLoRA-style) gives its shape; the adapters are f32 either way.
  const int64_t in = quantized ? quantized->cols : weight.size(1), out = quantized ? quantized->rows : weight.size(0);
  const Device device = quantized ? quantized->device() : weight.device();
  lora_A = register_module("lora_A", std::make_shared<Linear>(in, rank, init, false));
  lora_B = register_module("lora_B", std::make_shared<Linear>(rank, out, init, false));
  if (lora_B->weight.device().type != DeviceType::meta) lora_B->load_parameters({{"weight", zeros({out, rank})}});
  for (Linear* l : {lora_A.get(), lora_B.get()}) move_tensor_in_place(l->weight, device, DType::f32);
  lora_scale = scale;
  lora_dropout = dropout_p;
  lora_dropout_gen_ = std::move(dropout_gen);
}

void Linear::merge_lora() {
  KILN_CHECK(lora_A, "merge_lora: this linear layer has no LoRA adapter");
  if (!weight.defined()) dequantize();  // a quantized base (a GGUF file's): the merged layer is float
  {
    NoGradGuard values_only;
    const Tensor delta = mul_scalar(matmul(lora_B->weight, lora_A->weight), lora_scale);
    copy_into(to_dtype(add(to_dtype(weight, DType::f32), delta.to(weight.device())), weight.dtype()), weight);
  }
  drop_module("lora_A");
  drop_module("lora_B");
  lora_A.reset();
  lora_B.reset();
}

Embedding::Embedding(int64_t num, int64_t dim, Generator& gen, double stddev) {
  weight = register_parameter("weight", normal_tensor({num, dim}, stddev, gen));
}

Tensor Embedding::forward(const Tensor& ids) {
  return quantized ? quantized_embedding(*quantized, ids) : embedding(weight, ids, padding_idx);
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

void WeightModule::dequantize() {
  if (!quantized) return;
  Tensor values = Tensor::empty({quantized->rows, quantized->cols}, DType::f32);
  for (int64_t r = 0; r < quantized->rows; ++r) dequantize_row(*quantized, r, values.data<float>() + r * quantized->cols);
  weight = register_parameter("weight", quantized->dtype == DType::f32 ? values : values.to(quantized->dtype));
  quantized.reset();
}

void WeightModule::before_move(Device device) {
  if (quantized && quantized->half() && device.is_cuda()) dequantize();
}

void WeightModule::set_quantized(std::shared_ptr<const QuantizedMatrix> q) {
  if (weight.defined())
    KILN_CHECK(q->rows == weight.size(0) && q->cols == weight.size(1), "quantized weights [", q->rows, ", ", q->cols,
               "] do not fit a weight of shape ", shape_str(weight.shape()));
  // Rows in groups of eight where the format has that layout: decoding reads them as one stream
  // (kiln/core/quantized.h).
  quantized = can_group_rows(q->format) && !q->grouped_rows ? std::make_shared<const QuantizedMatrix>(group_rows(*q))
                                                         : std::move(q);
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

LayerNorm::LayerNorm(int64_t dim, double eps, bool with_bias) : eps_(eps) {
  weight = register_parameter("weight", ones({dim}));
  if (with_bias) bias = register_parameter("bias", zeros({dim}));
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
