// Autocast: run matrix products in bf16/f16 while the parameters stay f32,
// like torch.autocast. A thread-local dtype is set for a scope with
// AutocastGuard; the differentiable ops consult it through the policy hooks
// below, each one line at the top of the op (kiln/autograd/ops_*.cpp).
//
// Policy (PyTorch's, reduced to Kiln's op set):
//  * lower precision: matmul, linear, conv2d, scaled_dot_product_attention
//    cast their f32 inputs to the autocast dtype and produce outputs in it.
//    The cast is the differentiable to_dtype, so the gradient reaching an f32
//    parameter is cast back and accumulates in f32. f64 inputs are never
//    lowered (they are gradient-check references).
//  * f32: softmax, log_softmax, cross_entropy and layer_norm cast bf16/f16
//    inputs up to f32 and compute and return f32 (exp, sums of many terms and
//    variances lose too much in 8 or 11 mantissa bits).
//  * linear_cross_entropy keeps f32 logits, losses and gradients; under bf16
//    autocast its three products take bf16 operands where the backend
//    multiplies bf16 into f32 faster (Backend::fast_bf16_to_f32_matmul).
//  * everything else runs in its inputs' dtype. Binary elementwise ops promote
//    mixed float dtypes to the wider one (f64 > f32 > bf16/f16; bf16 with f16
//    gives f32), with or without autocast, as PyTorch's type promotion does.
//
// Casts are not cached in training (the weights change every step): a
// weight used twice in one forward is cast twice. Where the weights stay
// fixed, as in serving, a WeightCastCache keeps each parameter's cast.
//
// Layering: this header needs only kiln/core, so kiln/autograd can consult
// it (as PyTorch keeps autocast state in its core library); autocast.cpp
// uses autograd's to_dtype for the casts.
#pragma once
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln::amp {

// The autocast dtype of this thread (bf16 or f16), or nullopt when off.
std::optional<DType> autocast_dtype();

// Turns autocast on with `dtype` (bf16 or f16) for a scope; f32 turns it off
// (as torch.autocast(enabled=False)). Restores the previous state on exit.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

// The casts of parameters (leaf tensors that require grad), made once and
// reused while the cache is installed on a thread (Scope); for inference
// with weights that do not change while it is, such as kiln serve's (the
// casts carry no gradient). Without it a decode step, which reads every
// weight for a token or a few, spends as long casting the weights as
// multiplying by them. Thread-safe; a cached cast holds its parameter, so
// an address is never reused for another.
class WeightCastCache {
 public:
  class Scope {
   public:
    explicit Scope(WeightCastCache& cache);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    WeightCastCache* previous_;
  };
  // The cast of parameter `t` to `dtype`, made on first use.
  Tensor cast(const Tensor& t, DType dtype);
  size_t size() const;

 private:
  struct Entry {
    Tensor parameter, cast;
  };
  mutable std::mutex mutex_;
  std::map<std::pair<const TensorImpl*, DType>, Entry> casts_;
};

// ---- policy hooks for the ops (see the policy above)

// Matrix products: true if autocast is on and a defined f32 (or the other
// 16-bit) input is not yet in the autocast dtype.
bool autocast_should_lower(std::initializer_list<const Tensor*> inputs);
// t cast to the autocast dtype (differentiable) if it is f32, bf16 or f16;
// else (f64, integers, undefined) t. A parameter's cast comes from the
// thread's WeightCastCache where one is installed.
Tensor autocast_lower(const Tensor& t);

// f32 ops: true if autocast is on and a defined input is bf16 or f16.
bool autocast_should_upcast(std::initializer_list<const Tensor*> inputs);
// t cast to f32 (differentiable) if it is bf16 or f16; else t.
Tensor autocast_upcast(const Tensor& t);

// ---- type promotion for binary elementwise ops

// The wider of two float dtypes (bf16 with f16 gives f32). Throws for a
// non-float operand.
DType promote_float_dtypes(DType a, DType b);
// True if a and b are both floating and of different dtypes.
bool needs_promotion(const Tensor& a, const Tensor& b);
// x cast (differentiable) to the promoted dtype of x and other.
Tensor promote(const Tensor& x, const Tensor& other);

}  // namespace kiln::amp
