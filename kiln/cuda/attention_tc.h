// Tensor-core attention (attention_tc.cu) for the shapes models train with:
// bf16 or f16, head dim 64 or 128. attention.cu and attention_backward.cu
// call it where it applies and keep their CUDA-core kernels for the rest
// (f32, f64, other head dims), which stay the reference.
#pragma once
#include <initializer_list>

#include "kiln/core/tensor.h"

namespace kiln::cuda {

// bf16/f16 q with head dim 64 or 128, and every tensor 16-byte aligned.
// Shapes and contiguity are checked by the callers.
bool tensor_core_attention_applies(const Tensor& q, std::initializer_list<const Tensor*> tensors);

void tensor_core_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                           bool causal);

// dd: each row's dout . out (f32), as attention_backward computes it first.
void tensor_core_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& lse, const Tensor& dd, Tensor& dq, Tensor& dk, Tensor& dv,
                                    float scale, bool causal);

}  // namespace kiln::cuda
