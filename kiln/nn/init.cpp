#include "kiln/nn/init.h"

namespace kiln::nn {

Tensor uniform_tensor(const Shape& shape, double bound, Generator& gen) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float((2.0 * gen.uniform() - 1.0) * bound);
  return t;
}

Tensor normal_tensor(const Shape& shape, double stddev, Generator& gen) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(gen.normal() * stddev);
  return t;
}

}  // namespace kiln::nn
