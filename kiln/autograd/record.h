// Recording a backward rule. Ops write their rule as a lambda over the
// output's gradient; the lambda captures what it needs with saved(), and is
// dropped (freeing those tensors) once backward has run.
#pragma once
#include <functional>

#include "kiln/autograd/node.h"
#include "kiln/backend/backend.h"

namespace kiln {

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct LambdaNode final : GradNode {
  const char* label;
  BackwardFn fn;
  LambdaNode(const char* l, BackwardFn f) : label(l), fn(std::move(f)) {}
  const char* name() const override { return label; }
  std::vector<Tensor> backward(const Tensor& g) override { return fn(g); }
  void release() override { fn = nullptr; }
};

// Attaches `fn` as out's backward if grad mode is on and an input needs
// grad. The rule becomes a BackwardFn only then: inference (decoding, where
// no input needs grad) pays for no std::function or node.
template <typename Rule>
inline void record(Tensor& out, const char* name, std::initializer_list<const Tensor*> inputs, Rule&& fn) {
  if (!any_requires_grad(inputs)) return;
  attach_node(out, std::make_shared<LambdaNode>(name, BackwardFn(std::forward<Rule>(fn))), inputs);
}

namespace detail {

inline Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }

inline void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  KILN_CHECK(a.device() == b.device(), op, ": operands are on different devices (", a.device().str(), " and ",
             b.device().str(), "); move one with .to(device)");
}
inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  KILN_CHECK(a.dtype() == b.dtype(), op, ": operands have different dtypes (", dtype_name(a.dtype()), " and ",
             dtype_name(b.dtype()), "); convert one with .to(dtype)");
}
// Stride-0 view of t broadcast to `shape` (no gradient recorded).
Tensor broadcast_view(const Tensor& t, const Shape& shape);
// True when nothing but the caller holds `g` or its storage: backward may
// then write an input's gradient over the incoming gradient instead of
// allocating (the engine hands each node its gradient by reference and
// keeps no other copy; a gradient passed through to two inputs, or a view,
// is shared and fails this).
inline bool sole_reference(const Tensor& g) {
  return g.impl_ptr().use_count() == 1 && g.impl().storage.use_count() == 1 && g.is_contiguous();
}
// Output buffer for an op.
inline Tensor new_tensor(const Shape& shape, DType dtype, Device device) { return Tensor::empty(shape, dtype, device); }

}  // namespace detail
}  // namespace kiln
