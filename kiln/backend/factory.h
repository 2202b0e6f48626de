// Tensor creation that needs a backend (fills) and host<->device moves.
// Nothing here records gradients; see kiln/autograd for that.
#pragma once
#include "kiln/backend/backend.h"

namespace kiln {

Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
// 0, 1, ..., n-1
Tensor arange(int64_t n, DType dtype = DType::i64, Device device = Device::cpu());

// Copies src into a new contiguous tensor of `dtype` on `device`.
Tensor copy_to(const Tensor& src, Device device, DType dtype);
// Copies src into dst (same shape; any devices/dtypes/layouts).
void copy_into(const Tensor& src, Tensor& dst);

}  // namespace kiln
