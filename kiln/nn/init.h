// Parameter initialisation from a seeded Generator (PyTorch's defaults).
#pragma once
#include "kiln/core/random.h"
#include "kiln/core/tensor.h"

namespace kiln::nn {

Tensor uniform_tensor(const Shape& shape, double bound, Generator& gen);  // U(-bound, bound)
Tensor normal_tensor(const Shape& shape, double stddev, Generator& gen);  // N(0, stddev^2)

// Modules create their parameters on the CPU and move them. While a
// MetaParametersGuard is alive on this thread they are created on the meta
// device instead and initialisation draws nothing: the planner builds
// GPT-2 XL in milliseconds, with no host memory (kiln/meta).
class MetaParametersGuard {
 public:
  MetaParametersGuard();
  ~MetaParametersGuard();
  MetaParametersGuard(const MetaParametersGuard&) = delete;
  MetaParametersGuard& operator=(const MetaParametersGuard&) = delete;
  static bool active();

 private:
  bool previous_;
};

}  // namespace kiln::nn
