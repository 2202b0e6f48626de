// SwiGLU's product (backend.h): a thread per element, gate * sigmoid(gate) *
// up with the unary op's sigmoid, each result rounded to T where the
// unfused ops round.
#include <initializer_list>

#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void silu_mul_kernel(const T* gate, const T* up, T* out, int64_t n) {
  using A = Acc<T>;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const A x = to_acc(gate[i]);
  const A s = rounded<T>(A(1) / (A(1) + exp_acc(-x)));
  out[i] = from_acc<T>(rounded<T>(x * s) * to_acc(up[i]));
}

}  // namespace

void CudaBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const char* op = "silu_mul";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gate, &up, &out}) {
    check_cuda(*t, op, "an operand");
    check_same_device(*t, gate, op);
    check_contiguous(*t, op, "an operand");
    check_shape(*t, gate.shape(), op, "an operand");
    check_dtype(*t, gate.dtype(), op, "an operand");
  }
  const int64_t n = gate.numel();
  if (n == 0) return;
  const int dev = gate.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(gate.dtype(), op, [&]<typename T>() {
    silu_mul_kernel<T><<<unsigned(ceil_div(n, 256)), 256, 0, stream_for(dev)>>>(ptr<const T>(gate), ptr<const T>(up),
                                                                               ptr<T>(out), n);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
