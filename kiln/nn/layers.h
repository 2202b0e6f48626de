// The standard layers. Initialisation follows PyTorch's defaults so that
// recipes tuned there behave the same here.
#pragma once
#include <optional>
#include "kiln/nn/init.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// A module whose matrix `weight` may be replaced by its quantized form for
// inference (kiln/core/quantized.h): Linear and Embedding.
class WeightModule : public Module {
 public:
  // Quantizes the weight, which is then dropped (undefined, no longer a parameter).
  void quantize(QuantFormat format);
  // Takes an already quantized matrix of the weight's shape (a quantized checkpoint).
  void set_quantized(std::shared_ptr<const QuantizedMatrix> q);
  // The weight in float again (the quantized matrix's dtype), a parameter once more.
  void dequantize();
  Tensor weight;
  std::shared_ptr<const QuantizedMatrix> quantized;

 protected:
  // f16 weights (a GGUF file's, kept at 2 bytes for the CPU's products)
  // become a parameter again for a GPU, which multiplies floats.
  void before_move(Device device) override;
};

class Linear : public WeightModule {
 public:
  Linear(int64_t in, int64_t out, Generator& gen, bool bias = true);
  // W x + b, plus scale * B A dropout(x) once a LoRA adapter is attached.
  Tensor forward(const Tensor& x) override;
  Tensor bias;  // weight [out, in], as torch.nn.Linear

  // LoRA (kiln/nn/lora.h): the children lora_A [rank, in] (PyTorch's
  // Linear init) and lora_B [out, rank] (zeros), named as peft names them.
  void attach_lora(int64_t rank, double scale, double dropout, Generator& init, std::shared_ptr<Generator> dropout_gen);
  // W += scale B A (in W's dtype; a quantized W is dequantized first), and
  // the adapter is gone: a plain Linear again.
  void merge_lora();
  void use_dropout_generator(const std::shared_ptr<Generator>& gen) override { lora_dropout_gen_ = gen; }
  std::shared_ptr<Linear> lora_A, lora_B;
  double lora_scale = 0, lora_dropout = 0;

 private:
  std::shared_ptr<Generator> lora_dropout_gen_;
};

class Embedding : public WeightModule {
 public:
  Embedding(int64_t num, int64_t dim, Generator& gen, double stddev = 1.0);
  Tensor forward(const Tensor& ids) override;
  // PyTorch's nn.Embedding(padding_idx): this token's row gets no gradient
  // (transformers builds its decoders' embeddings so, with the pad token).
  std::optional<int64_t> padding_idx;
};

// Quantizes the weights of every Linear and Embedding under `root` for
// inference (kiln/core/quantized.h): what --quantize does to a loaded model.
// Returns the bytes the quantized matrices hold.
size_t quantize_weights(Module& root, QuantFormat format);
// The product of x with a weight that may be quantized (a tied head reads
// the embedding's): quantized_linear if `q` is set, else linear.
Tensor linear_or_quantized(const Tensor& x, const Tensor& weight, const std::shared_ptr<const QuantizedMatrix>& q);

class LayerNorm : public Module {
 public:
  // with_bias false: no bias parameter (PyTorch's LayerNorm(bias=False), ModernBERT's).
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool with_bias = true);
  Tensor forward(const Tensor& x) override {
    return layer_norm(x, weight, bias.defined() ? bias : zeros(weight.shape(), weight.dtype(), weight.device()), eps_);
  }
  // For an output only matrix products read: in the autocast dtype under
  // autocast (layer_norm_for_matmul), else as forward.
  Tensor forward_for_matmul(const Tensor& x) {
    return layer_norm_for_matmul(
        x, weight, bias.defined() ? bias : zeros(weight.shape(), weight.dtype(), weight.device()), eps_);
  }
  Tensor weight, bias;

 private:
  double eps_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return gelu(x); }
};

class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override { return flatten(x, 1); }
};

// Inverted dropout, active only in training mode. Draws from a generator it
// shares with the trainer, which saves that generator's state in checkpoints.
class Dropout : public Module {
 public:
  Dropout(double p, std::shared_ptr<Generator> gen) : p_(p), gen_(std::move(gen)) {}
  Tensor forward(const Tensor& x) override { return is_training() && p_ > 0 ? dropout(x, p_, *gen_) : x; }
  void use_dropout_generator(const std::shared_ptr<Generator>& gen) override { gen_ = gen; }
  double p() const { return p_; }

 private:
  double p_;
  std::shared_ptr<Generator> gen_;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in, int64_t out, int64_t kernel, Generator& gen, int64_t stride = 1, int64_t padding = 0,
         bool bias = true);
  Tensor forward(const Tensor& x) override { return conv2d(x, weight, bias, stride_, padding_); }
  Tensor weight, bias;  // weight [out, in, k, k]

 private:
  int64_t stride_, padding_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0) : kernel_(kernel), stride_(stride) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_); }

 private:
  int64_t kernel_, stride_;
};

// A container whose children the caller names: the path segments of
// checkpoint names ("transformer", "self_attn", "attention.self") that have
// no module of their own.
class Named : public Module {
 public:
  template <typename M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> m) {
    return register_module(name, std::move(m));
  }
};

class Sequential : public Module {
 public:
  // Children are named "0", "1", ... as in torch.nn.Sequential.
  template <typename M>
  Sequential& add(std::shared_ptr<M> m) {
    layers_.push_back(register_module(std::to_string(layers_.size()), std::move(m)));
    return *this;
  }
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace kiln::nn
