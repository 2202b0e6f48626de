// softmax / log-softmax over the last dim, forward and backward.
//
//  forward   y = exp(x - max) / sum          log: y = x - max - log(sum)
//  backward  dx = y * (dy - sum(dy * y))     log: dx = dy - exp(y) * sum(dy)
//
// Inputs and outputs are contiguous [rows, C] (backend.h). A warp owns a row
// when C <= 1024 (8 rows per 256-thread block), a whole 256-thread block
// otherwise. Three passes over the row (max, sum, write): the row is re-read
// from L1/L2, and the code stays simple. f32 compute for bf16/f16.
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/row_reduce.cuh"

namespace kiln::cuda {
namespace {

template <typename T, int GROUP>
__global__ void softmax_kernel(const T* x, T* y, int64_t rows, int64_t C, bool log_out) {
  using A = Acc<T>;
  __shared__ A scratch[32];
  RowSlot<GROUP> slot;
  if (slot.row >= rows) return;  // only GROUP == 32 can get here; whole warps leave together
  const T* xr = x + slot.row * C;
  T* yr = y + slot.row * C;
  A m = neg_infinity<A>();
  for (int64_t j = slot.lane; j < C; j += GROUP) m = max_nan(m, to_acc(xr[j]));
  m = group_max<GROUP>(m, scratch);
  A s = 0;
  for (int64_t j = slot.lane; j < C; j += GROUP) s += exp_acc(to_acc(xr[j]) - m);
  s = group_sum<GROUP>(s, scratch);
  if (log_out) {
    const A shift = m + log_acc(s);
    for (int64_t j = slot.lane; j < C; j += GROUP) yr[j] = from_acc<T>(to_acc(xr[j]) - shift);
  } else {
    const A inv = A(1) / s;
    for (int64_t j = slot.lane; j < C; j += GROUP) yr[j] = from_acc<T>(exp_acc(to_acc(xr[j]) - m) * inv);
  }
}

template <typename T, int GROUP>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t C, bool log_out) {
  using A = Acc<T>;
  __shared__ A scratch[32];
  RowSlot<GROUP> slot;
  if (slot.row >= rows) return;
  const int64_t base = slot.row * C;
  A s = 0;
  for (int64_t j = slot.lane; j < C; j += GROUP)
    s += log_out ? to_acc(dy[base + j]) : to_acc(dy[base + j]) * to_acc(y[base + j]);
  s = group_sum<GROUP>(s, scratch);
  for (int64_t j = slot.lane; j < C; j += GROUP) {
    A yv = to_acc(y[base + j]), g = to_acc(dy[base + j]);
    dx[base + j] = from_acc<T>(log_out ? g - exp_acc(yv) * s : yv * (g - s));
  }
}

template <typename T, typename LaunchWarp, typename LaunchBlock>
void launch_rows(int64_t rows, int64_t C, LaunchWarp&& warp, LaunchBlock&& block) {
  if (C <= 1024)
    warp(unsigned(ceil_div(rows, 8)));
  else
    block(unsigned(rows));
}

void check_rows(const Tensor& t, const Tensor& like, const char* op, const char* what) {
  check_cuda(t, op, what);
  check_same_device(t, like, op);
  check_contiguous(t, op, what);
  check_shape(t, like.shape(), op, what);
  check_dtype(t, like.dtype(), op, what);
}

}  // namespace

void CudaBackend::softmax(const Tensor& x, Tensor& out, bool log) {
  check_cuda(x, "softmax", "x");
  check_contiguous(x, "softmax", "x");
  check_rows(out, x, "softmax", "out");
  KILN_CHECK(x.dim() >= 1, "softmax: x must have at least one dim");
  const int64_t C = x.size(-1), rows = C == 0 ? 0 : x.numel() / C;
  if (rows == 0) return;
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  dispatch_floating(x.dtype(), "softmax", [&]<typename T>() {
    launch_rows<T>(
        rows, C,
        [&](unsigned grid) {
          softmax_kernel<T, 32><<<grid, 256, 0, stream>>>(ptr<const T>(x), ptr<T>(out), rows, C, log);
        },
        [&](unsigned grid) {
          softmax_kernel<T, 256><<<grid, 256, 0, stream>>>(ptr<const T>(x), ptr<T>(out), rows, C, log);
        });
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  check_cuda(y, "softmax_backward", "y");
  check_contiguous(y, "softmax_backward", "y");
  check_rows(dy, y, "softmax_backward", "dy");
  check_rows(dx, y, "softmax_backward", "dx");
  KILN_CHECK(y.dim() >= 1, "softmax_backward: y must have at least one dim");
  const int64_t C = y.size(-1), rows = C == 0 ? 0 : y.numel() / C;
  if (rows == 0) return;
  const int dev = y.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  dispatch_floating(y.dtype(), "softmax_backward", [&]<typename T>() {
    launch_rows<T>(
        rows, C,
        [&](unsigned grid) {
          softmax_backward_kernel<T, 32>
              <<<grid, 256, 0, stream>>>(ptr<const T>(y), ptr<const T>(dy), ptr<T>(dx), rows, C, log);
        },
        [&](unsigned grid) {
          softmax_backward_kernel<T, 256>
              <<<grid, 256, 0, stream>>>(ptr<const T>(y), ptr<const T>(dy), ptr<T>(dx), rows, C, log);
        });
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
