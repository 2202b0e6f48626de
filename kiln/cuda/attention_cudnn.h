// cuDNN's fused attention: its frontend's SDPA graphs, which on Hopper run
// wgmma kernels that Kiln's mma.sync ones (attention_tc.cu) cannot match,
// and which PyTorch's scaled_dot_product_attention picks there. Taken for
// the shapes tensor_core_attention takes (bf16/f16, head dim 64 or 128,
// heads read in place through their strides).
//
// libcudnn.so.9 is loaded on first use. Where it is missing, where cuDNN
// declines a shape, or with KILN_CUDNN=0, these return false and the
// caller runs Kiln's kernels. Both passes keep the log-sum-exp that
// attention_tc.cu keeps (natural log, f32 [B, H, T]), so a forward by one
// and a backward by the other agree. The backward asks for cuDNN's
// deterministic algorithm: the same bits on every run, as Kiln's own.
#pragma once
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::cuda {

bool cudnn_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                     bool causal);
bool cudnn_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, float scale,
                              bool causal);

// Whether cuDNN runs attention in this process, and if not, why (kiln info).
std::string cudnn_attention_status();

// false sends every attention to Kiln's kernels (tests compare the two).
void set_cudnn_attention_enabled(bool enabled);

}  // namespace kiln::cuda
