// The matmul epilogue for the cases cuBLASLt does not fuse (f64 through
// cublasDgemm, a pre_gelu whose leading dim is not a multiple of 8, a strided
// bias): out = gelu?(out + bias[n]), saving the pre-GELU value if asked.
// Any strides for out and pre_gelu; bias is [N] with any stride. One thread
// per element; f32 compute for bf16/f16.
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"
#include "kiln/cuda/strided.h"

namespace kiln::cuda {
namespace {

// Operands: 0 = out, 1 = bias (stride 0 except along N), 2 = pre_gelu.
template <typename T>
__global__ void bias_gelu_kernel(T* out, const T* bias, T* pre_gelu, StridedLayout<3> layout, int64_t n, bool gelu_on) {
  using A = Acc<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    layout.offsets(i, off);
    A v = to_acc(out[off[0]]);
    if (bias) v += to_acc(bias[off[1]]);
    if (pre_gelu) pre_gelu[off[2]] = from_acc<T>(v);
    out[off[0]] = from_acc<T>(gelu_on ? gelu(v) : v);
  }
}

}  // namespace

void matmul_bias_gelu(Tensor& out, const Tensor& bias, bool gelu_on, Tensor& pre_gelu) {
  if (!bias.defined() && !gelu_on) return;
  const int64_t n = out.numel();
  if (n == 0) return;
  const int rank = out.dim();
  Strides bias_strides(rank, 0);
  if (bias.defined()) {
    KILN_CHECK(bias.numel() == out.size(-1), "matmul: bias has ", bias.numel(),
               " elements, expected N = ", out.size(-1));
    check_dtype(bias, out.dtype(), "matmul", "bias");
    bias_strides[rank - 1] = bias.stride(-1);
  }
  const bool save = gelu_on && pre_gelu.defined();
  if (save) {
    check_shape(pre_gelu, out.shape(), "matmul", "pre_gelu");
    check_dtype(pre_gelu, out.dtype(), "matmul", "pre_gelu");
  }
  const Strides& pre_strides = save ? pre_gelu.strides() : out.strides();
  StridedLayout<3> layout = make_layout<3>(out.shape(), {&out.strides(), &bias_strides, &pre_strides});
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(out.dtype(), "matmul epilogue", [&]<typename T>() {
    bias_gelu_kernel<T>
        <<<grid_for(n, 256, dev), 256, 0, stream_for(dev)>>>(ptr<T>(out), bias.defined() ? ptr<const T>(bias) : nullptr,
                                                             save ? ptr<T>(pre_gelu) : nullptr, layout, n, gelu_on);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
