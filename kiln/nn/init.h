// Parameter initialisation from a seeded Generator (PyTorch's defaults).
#pragma once
#include "kiln/core/random.h"
#include "kiln/core/tensor.h"

namespace kiln::nn {

Tensor uniform_tensor(const Shape& shape, double bound, Generator& gen);  // U(-bound, bound)
Tensor normal_tensor(const Shape& shape, double stddev, Generator& gen);  // N(0, stddev^2)

}  // namespace kiln::nn
