#include "kiln/core/tensor.h"

#include "kiln/core/pooled.h"

namespace kiln {

Storage::Storage(size_t n, Device d) : bytes(n), device(d), category(MemoryCategoryScope::current()) {
  data = allocator_for(device).allocate(bytes, category);
}

Storage::Storage(void* d, size_t n, std::shared_ptr<void> o)
    : data(d), bytes(n), device(Device::cpu()), category(MemoryCategory::weights), owner(std::move(o)) {}

Storage::~Storage() {
  if (!owner) allocator_for(device).deallocate(data, bytes, category);
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner) {
  auto impl = std::allocate_shared<TensorImpl>(PoolAllocator<TensorImpl>());
  impl->storage = std::allocate_shared<Storage>(PoolAllocator<Storage>(), data, size_t(shape_numel(shape)) * dtype_size(dtype), std::move(owner));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) KILN_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  auto impl = std::allocate_shared<TensorImpl>(PoolAllocator<TensorImpl>());
  impl->storage = std::allocate_shared<Storage>(PoolAllocator<Storage>(), size_t(shape_numel(shape)) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return "Tensor" + shape_str(shape()) + " " + dtype_name(dtype()) + " " + device().str();
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides, int64_t offset) const {
  KILN_CHECK(shape.size() == strides.size(), "as_strided: shape ", shape_str(shape), " and strides ",
             shape_str(strides), " differ in rank");
  auto v = std::allocate_shared<TensorImpl>(PoolAllocator<TensorImpl>());
  v->storage = impl().storage;
  v->offset = offset;
  v->shape = shape;
  v->strides = strides;
  v->dtype = dtype();
  // Bounds check: the furthest element must lie inside the storage.
  int64_t last = offset;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] > 0) last += (shape[i] - 1) * strides[i];
  bool empty = shape_numel(shape) == 0;
  KILN_CHECK(empty || (offset >= 0 && (last + 1) * int64_t(element_size()) <= int64_t(impl().storage->bytes)),
             "as_strided: view ", shape_str(shape), " at offset ", offset, " reaches past its storage");
  return Tensor(std::move(v));
}

Tensor& Tensor::set_requires_grad(bool r) {
  KILN_CHECK(!r || dtype_is_floating(dtype()), "only floating-point tensors can require gradients, got ",
             dtype_name(dtype()));
  impl().requires_grad = r;
  return *this;
}

Tensor Tensor::scalar(double value, DType dtype, Device device) {
  Tensor t = empty({}, dtype, Device::cpu());
  switch (dtype) {
    case DType::f32: *t.data<float>() = float(value); break;
    case DType::f64: *t.data<double>() = value; break;
    case DType::i32: *t.data<int32_t>() = int32_t(value); break;
    case DType::i64: *t.data<int64_t>() = int64_t(value); break;
    case DType::u8: *t.data<uint8_t>() = uint8_t(value); break;
    case DType::bf16: *static_cast<uint16_t*>(t.data_ptr()) = float_to_bf16(float(value)); break;
    case DType::f16: *static_cast<uint16_t*>(t.data_ptr()) = float_to_f16(float(value)); break;
  }
  return device.is_cpu() ? t : t.to(device);
}

}  // namespace kiln
