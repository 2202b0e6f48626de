#include "kiln/backend/factory.h"

namespace kiln {

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  backend_for(device).fill(t, value);
  return t;
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }

Tensor arange(int64_t n, DType dtype, Device device) {
  std::vector<int64_t> v(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = i;
  return copy_to(Tensor::from_vector(v, {n}), device, dtype);
}

void copy_into(const Tensor& src, Tensor& dst) {
  // The CUDA backend handles host<->device itself; CPU<->CPU is the CPU's;
  // the meta backend refuses to copy out of meta (it has no values).
  Device d = src.device().is_cpu() ? dst.device() : src.device();
  backend_for(d).copy(src, dst);
}

Tensor copy_to(const Tensor& src, Device device, DType dtype) {
  Tensor dst = Tensor::empty(src.shape(), dtype, device);
  copy_into(src, dst);
  return dst;
}

}  // namespace kiln
