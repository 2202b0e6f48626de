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
