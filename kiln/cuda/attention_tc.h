// Tensor-core attention (attention_tc.cu) for the shapes models train with:
// bf16 or f16, head dim 64 or 128. attention.cu and attention_backward.cu
// call it where it applies and keep their CUDA-core kernels for the rest
// (f32, f64, other head dims), which stay the reference.
#pragma once
#include <initializer_list>

#include "kiln/core/tensor.h"

namespace kiln::cuda {

// bf16/f16 q with head dim 64 or 128, and every tensor a [B, H, T, D] view
// with unit stride along D, strides that are multiples of 8 elements and a
// 16-byte aligned start (contiguous heads, and heads of a packed q|k|v
// projection, read in place). Shapes are checked by the callers.
bool tensor_core_attention_applies(const Tensor& q, std::initializer_list<const Tensor*> tensors);

void tensor_core_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                           bool causal);

// dd: [B*H*T] f32 scratch for each row's dout . out, which the dQ pass
// writes and the dK/dV pass reads.
void tensor_core_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, Tensor& dd, Tensor& dq, Tensor& dk,
                                    Tensor& dv, float scale, bool causal);

}  // namespace kiln::cuda
