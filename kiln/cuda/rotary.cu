// Rotary position embedding (backend.h): a thread per element of x [N, D];
// its row's cos and sin through their strides over x's leading dims (0
// where heads share a position's row). Compute in Acc<T>, each product and
// the sum rounded to T as the unfused x * cos + rotate_half(x) * sin rounds.
#include <algorithm>
#include <initializer_list>

#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"
#include "kiln/cuda/strided.h"

namespace kiln::cuda {
namespace {

// A product rounded to T, never contracted into a multiply-add with the sum
// after it (nvcc contracts by default): the unfused ops round each.
__device__ __forceinline__ float product_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double product_rn(double a, double b) { return __dmul_rn(a, b); }
template <typename T>
__device__ __forceinline__ Acc<T> rounded_product(Acc<T> a, Acc<T> b) {
  return rounded<T>(product_rn(a, b));
}

template <typename T>
__global__ void rotary_kernel(const T* x, const T* cos, const T* sin, T* y, StridedLayout<2> tables, int64_t N,
                              int64_t D, int64_t R) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= N * D) return;
  const int64_t row = e / D, j = e % D, half = R / 2;
  if (j >= R) {
    y[e] = x[e];
    return;
  }
  int64_t at[2];
  tables.offsets(row, at);
  const T* xr = x + row * D;
  const Acc<T> c = to_acc(cos[at[0] + j]), s = to_acc(sin[at[1] + j]), own = to_acc(xr[j]);
  const Acc<T> partner = j < half ? -to_acc(xr[j + half]) : to_acc(xr[j - half]);
  y[e] = from_acc<T>(rounded_product<T>(own, c) + rounded_product<T>(partner, s));
}

}  // namespace

void CudaBackend::rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  const char* op = "rotary";
  check_cuda(x, op, "x");
  check_contiguous(x, op, "x");
  check_cuda(y, op, "y");
  check_contiguous(y, op, "y");
  check_shape(y, x.shape(), op, "y");
  const int64_t D = x.dim() >= 1 ? x.size(-1) : 0, R = cos.dim() == x.dim() ? cos.size(-1) : -1;
  KILN_CHECK(R >= 0 && R % 2 == 0 && R <= D && sin.shape() == cos.shape(), op, ": cos and sin ",
             shape_str(cos.shape()), " must be x's leading shape ", shape_str(x.shape()), " with an even width <= ", D);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&cos, &sin, &y}) {
    check_cuda(*t, op, "an operand");
    check_same_device(*t, x, op);
    check_dtype(*t, x.dtype(), op, "an operand");
  }
  Shape lead(x.shape().begin(), x.shape().end() - 1);
  Strides cos_lead(cos.strides().begin(), cos.strides().end() - 1), sin_lead(sin.strides().begin(), sin.strides().end() - 1);
  for (size_t d = 0; d < lead.size(); ++d)
    KILN_CHECK(cos.size(int64_t(d)) == lead[d], op, ": cos ", shape_str(cos.shape()), " must have x's leading shape ",
               shape_str(x.shape()), " (expand it)");
  KILN_CHECK(R == 0 || (cos.stride(-1) == 1 && sin.stride(-1) == 1), op, ": cos and sin rows must be contiguous");
  const int64_t N = x.numel() / std::max<int64_t>(D, 1);
  if (x.numel() == 0) return;
  const StridedLayout<2> tables = make_layout<2>(lead, {&cos_lead, &sin_lead});
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    rotary_kernel<T><<<unsigned(ceil_div(N * D, 256)), 256, 0, stream_for(dev)>>>(
        ptr<const T>(x), ptr<const T>(cos), ptr<const T>(sin), ptr<T>(y), tables, N, D, R);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
