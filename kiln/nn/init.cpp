#include "kiln/nn/init.h"

namespace kiln::nn {

namespace {
thread_local bool t_meta_parameters = false;
}

MetaParametersGuard::MetaParametersGuard() : previous_(t_meta_parameters) { t_meta_parameters = true; }
MetaParametersGuard::~MetaParametersGuard() { t_meta_parameters = previous_; }
bool MetaParametersGuard::active() { return t_meta_parameters; }

Tensor uniform_tensor(const Shape& shape, double bound, Generator& gen) {
  if (t_meta_parameters) return Tensor::empty(shape, DType::f32, Device::meta());
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float((2.0 * gen.uniform() - 1.0) * bound);
  return t;
}

Tensor normal_tensor(const Shape& shape, double stddev, Generator& gen) {
  if (t_meta_parameters) return Tensor::empty(shape, DType::f32, Device::meta());
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(gen.normal() * stddev);
  return t;
}

}  // namespace kiln::nn
