// f32 convolutions through oneDNN's direct (non-im2col) kernels, in the
// blocked layouts oneDNN picks for the machine. Kiln's tensors stay NCHW and
// OIHW; each call reorders into the blocked layouts and back. Measured on the
// Fashion-MNIST CNN's two convolutions, that is still 2-3x faster than
// im2col + GEMM (docs/PERFORMANCE.md). Results are the same run to run at a
// given thread count; the weight gradient's sums are split between threads,
// so they can differ in the last bits from one thread count to another.
//
// Every buffer a call needs (blocked copies and oneDNN's scratchpad) is a
// Kiln workspace tensor, allocated at the start of the call in the order
// scratch_bytes lists, so the meta backend plans the same bytes.
#pragma once
#include <cstdint>
#include <vector>

#include "kiln/cpu/cpu_backend.h"

namespace kiln::cpu::dnnl_conv {

// True when this build has oneDNN and the op is a convolution with no empty
// dimension, in f32, or in bf16 where oneDNN's bf16 kernels are the faster
// (bf16_gemm_available(), kiln/cpu/gemm.h). The im2col path covers f64 and
// the degenerate shapes; bf16 elsewhere is staged to f32.
bool usable(const Shape& x, const Shape& weight, DType dtype);

// The byte sizes of the workspace tensors one call allocates.
std::vector<int64_t> scratch_bytes(const Shape& x, const Shape& weight, const Conv2dArgs& args,
                                   const ConvScratchPass& pass, DType dtype);

// x, weight, out (and dout, dx, dweight) share one dtype, f32 or bf16; the
// bias is f32.
void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, const Conv2dArgs& args);
// dx and dweight are overwritten where defined (the bias gradient is the caller's).
void backward(const Tensor& dout, const Tensor& x, const Tensor& weight, Tensor& dx, Tensor& dweight,
              const Conv2dArgs& args);

}  // namespace kiln::cpu::dnnl_conv
