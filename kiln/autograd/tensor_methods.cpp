// Tensor's member conveniences (declared in kiln/core/tensor.h so the API
// reads like PyTorch), forwarding to the differentiable ops.
#include <atomic>

#include "kiln/autograd/node.h"
#include "kiln/autograd/ops.h"
#include "kiln/core/pooled.h"

namespace kiln {

Tensor Tensor::to(Device d) const { return to_device(*this, d); }
Tensor Tensor::to(DType t) const { return to_dtype(*this, t); }
Tensor Tensor::contiguous() const { return kiln::contiguous(*this); }
Tensor Tensor::reshape(const Shape& s) const { return kiln::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return kiln::view(*this, s); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return kiln::transpose(*this, a, b); }
Tensor Tensor::permute(const std::vector<int64_t>& d) const { return kiln::permute(*this, d); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const { return kiln::slice(*this, d, s, e, st); }
Tensor Tensor::expand(const Shape& s) const { return kiln::expand(*this, s); }
Tensor Tensor::unsqueeze(int64_t d) const { return kiln::unsqueeze(*this, d); }
Tensor Tensor::squeeze(int64_t d) const { return kiln::squeeze(*this, d); }

Tensor Tensor::clone() const {
  Tensor y = copy_to(*this, device(), dtype());
  if (requires_grad() && grad_enabled()) y = add_scalar(*this, 0.0);  // records identity backward
  return y;
}

Tensor Tensor::detach() const {
  auto v = std::allocate_shared<TensorImpl>(PoolAllocator<TensorImpl>());
  v->storage = impl().storage;
  v->offset = impl().offset;
  v->shape = impl().shape;
  v->strides = impl().strides;
  v->dtype = impl().dtype;
  return Tensor(std::move(v));
}

void Tensor::backward(const Tensor& grad_output, bool retain_graph) const {
  run_backward(*this, grad_output, retain_graph);
}

void Tensor::zero_grad() { impl().grad.reset(); }

int64_t Tensor::add_grad_ready_hook(std::function<void(const Tensor& leaf)> hook) {
  KILN_CHECK(is_leaf() && requires_grad(), "a grad-ready hook needs a leaf that requires grad (a parameter)");
  static std::atomic<int64_t> next_id{1};
  const int64_t id = next_id++;
  impl().grad_ready_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_grad_ready_hook(int64_t id) {
  std::erase_if(impl().grad_ready_hooks, [id](const auto& entry) { return entry.first == id; });
}

double Tensor::item() const {
  KILN_CHECK(numel() == 1, "item() needs a single-element tensor, got shape ", shape_str(shape()));
  return to_vector<double>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = copy_to(*this, Device::cpu(), dtype_of<T>());
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

}  // namespace kiln
