// Tensor: a refcounted view (shape, strides, offset, dtype) onto refcounted
// Storage. Views (reshape, transpose, slice, expand) share storage and cost
// nothing; copies happen only in contiguous(), clone() and to().
//
// Core owns the data layout and raw views. Differentiable operations are free
// functions in kiln/autograd/ops.h. The few member conveniences that record
// gradients (to, contiguous, reshape, backward, ...) are declared here so the
// API reads like PyTorch, and defined in kiln/autograd/tensor_methods.cpp.
#pragma once
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "kiln/core/allocator.h"
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/shape.h"

namespace kiln {

struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  MemoryCategory category = MemoryCategory::other;
  // Memory the allocator did not give (a mapped file): `owner` keeps it alive.
  std::shared_ptr<void> owner;
  Storage(size_t bytes, Device device);
  Storage(void* data, size_t bytes, std::shared_ptr<void> owner);  // CPU memory
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

struct GradNode;  // defined in kiln/autograd/node.h
struct TensorImpl;
class Tensor;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Strides strides;
  DType dtype = DType::f32;
  // Autograd state. grad_fn is set on results of recorded ops; leaves that
  // require grad accumulate into `grad`.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<GradNode> grad_fn;
  uint32_t output_nr = 0;
  // Called by backward once this leaf's .grad holds every gradient that
  // backward sends it (PyTorch's post-accumulate-grad hooks): what data
  // parallelism and offload use to move gradients while backward runs on.
  std::vector<std::pair<int64_t, std::function<void(const Tensor& leaf)>>> grad_ready_hooks;
};

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- creation (uninitialised memory; see kiln/backend/factory.h for zeros etc.)
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // A contiguous CPU tensor over `data`, which `owner` keeps alive.
  static Tensor wrap(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner);
  static Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }
  // Copies host values into a new CPU tensor.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    KILN_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
               " values do not fill shape ", shape_str(shape));
    Tensor t = empty(shape, dtype_of<T>(), Device::cpu());
    if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
    return t;
  }
  static Tensor scalar(double value, DType dtype = DType::f32, Device device = Device::cpu());

  // ---- metadata
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t size(int64_t dim) const { return shape()[normalize_dim(dim, this->dim())]; }
  int64_t stride(int64_t dim) const { return strides()[normalize_dim(dim, this->dim())]; }
  int dim() const { return int(shape().size()); }
  int64_t numel() const { return shape_numel(shape()); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  int64_t offset() const { return impl().offset; }
  size_t element_size() const { return dtype_size(dtype()); }
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  bool is_contiguous() const;
  bool same_storage(const Tensor& o) const { return impl().storage == o.impl().storage; }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  std::string str() const;  // "Tensor[2, 3] f32 cpu"

  // ---- raw data (the element at `offset`)
  void* data_ptr() const {
    return static_cast<char*>(impl().storage->data) + offset() * int64_t(element_size());
  }
  template <typename T>
  T* data() const {
    KILN_CHECK(dtype() == dtype_of<T>(), "tensor holds ", dtype_name(dtype()), ", accessed as ",
               dtype_name(dtype_of<T>()));
    return static_cast<T*>(data_ptr());
  }

  // ---- raw views: share storage, record no gradient
  Tensor as_strided(const Shape& shape, const Strides& strides, int64_t offset) const;

  // ---- autograd state
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool r = true);
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& g) { impl().grad = g.impl_; }
  const std::shared_ptr<GradNode>& grad_fn() const { return impl().grad_fn; }
  bool is_leaf() const { return impl().grad_fn == nullptr; }

  // ---- conveniences defined in kiln/autograd/tensor_methods.cpp
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor detach() const;  // shares storage, drops history
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;  // like reshape, but never copies
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor expand(const Shape& shape) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  void backward(const Tensor& grad_output = Tensor(), bool retain_graph = false) const;
  void zero_grad();
  // Runs `hook` each time a backward has finished sending this leaf its
  // gradients (after they are summed into .grad). Returns an id for removal.
  int64_t add_grad_ready_hook(std::function<void(const Tensor& leaf)> hook);
  void remove_grad_ready_hook(int64_t id);
  double item() const;  // single-element tensors, any dtype/device
  template <typename T>
  std::vector<T> to_vector() const;  // host copy, in T (converted from the tensor's dtype)

  TensorImpl& impl() const {
    KILN_CHECK(impl_, "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace kiln
