// 2-D max pooling (NCHW, no padding), forward and backward.
//
//  forward   out[n,c,oh,ow] = max over the KHxKW window at (oh*sh, ow*sw);
//            indices (i32) = h*W + w of the first maximum in row-major window
//            order (strictly greater wins; a NaN always wins), as the CPU does.
//  backward  dx = 0, then dx[n, c, indices[...]] += dout[...]: one thread per
//            output, atomicAdd. The backward gets no window geometry, so it
//            cannot gather; with non-overlapping windows (stride >= kernel)
//            every dx element receives at most one add and the result is
//            exact; overlapping windows may sum in a varying order.
// Inputs are made contiguous first; f32 compute for bf16/f16. Indices outside
// the plane (never produced by the forward) are skipped rather than written;
// the CPU throws for them.
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void maxpool2d_kernel(const T* x, T* out, int32_t* indices, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                 int64_t OW, Pool2dArgs a) {
  using A = Acc<T>;
  const int64_t total = planes * OH * OW;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = e % OW, oh = (e / OW) % OH, plane = e / (OW * OH);
    const T* xp = x + plane * H * W;
    const int64_t h0 = oh * a.stride_h, w0 = ow * a.stride_w;
    int64_t best_i = h0 * W + w0;
    A best = to_acc(xp[best_i]);
    for (int64_t kh = 0; kh < a.kernel_h; ++kh)
      for (int64_t kw = 0; kw < a.kernel_w; ++kw) {
        const int64_t i = (h0 + kh) * W + w0 + kw;
        const A v = to_acc(xp[i]);
        if (v > best || v != v) {  // a NaN wins, as on the CPU (PyTorch's rule)
          best = v;
          best_i = i;
        }
      }
    out[e] = from_acc<T>(best);
    indices[e] = int32_t(best_i);
  }
}

template <typename T>
__global__ void maxpool2d_backward_kernel(const T* dout, const int32_t* indices, T* dx, int64_t outputs_per_plane,
                                          int64_t total, int64_t plane_size) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t plane = e / outputs_per_plane;
    const int32_t i = indices[e];
    if (i < 0 || i >= plane_size) continue;  // never produced by the forward; ignore rather than corrupt memory
    atomicAdd(dx + plane * plane_size + i, dout[e]);
  }
}

}  // namespace

void CudaBackend::maxpool2d(const Tensor& x_in, Tensor& out, Tensor& indices, const Pool2dArgs& args) {
  const char* op = "maxpool2d";
  check_cuda(x_in, op, "x");
  check_cuda(out, op, "out");
  check_cuda(indices, op, "indices");
  check_same_device(x_in, out, op);
  check_same_device(x_in, indices, op);
  KILN_CHECK(x_in.dim() == 4, "maxpool2d: x must be [N, C, H, W], got ", shape_str(x_in.shape()));
  KILN_CHECK(args.kernel_h > 0 && args.kernel_w > 0 && args.stride_h > 0 && args.stride_w > 0,
             "maxpool2d: kernel and stride must be positive");
  const int64_t N = x_in.size(0), C = x_in.size(1), H = x_in.size(2), W = x_in.size(3);
  KILN_CHECK(H >= args.kernel_h && W >= args.kernel_w, "maxpool2d: window ", args.kernel_h, "x", args.kernel_w,
             " is larger than the input ", H, "x", W);
  const int64_t OH = (H - args.kernel_h) / args.stride_h + 1, OW = (W - args.kernel_w) / args.stride_w + 1;
  check_shape(out, {N, C, OH, OW}, op, "out");
  check_shape(indices, {N, C, OH, OW}, op, "indices");
  check_dtype(out, x_in.dtype(), op, "out");
  check_dtype(indices, DType::i32, op, "indices");
  check_contiguous(out, op, "out");
  check_contiguous(indices, op, "indices");
  if (out.numel() == 0) return;
  KILN_CHECK(H * W < (int64_t(1) << 31), "maxpool2d: planes of 2^31 pixels or more are not supported");
  Tensor x = contiguous_or_copy(x_in);
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    maxpool2d_kernel<T><<<grid_for(out.numel(), 256, dev), 256, 0, stream_for(dev)>>>(
        ptr<const T>(x), ptr<T>(out), ptr<int32_t>(indices), N * C, H, W, OH, OW, args);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void CudaBackend::maxpool2d_backward(const Tensor& dout_in, const Tensor& indices_in, Tensor& dx) {
  const char* op = "maxpool2d_backward";
  check_cuda(dout_in, op, "dout");
  check_cuda(indices_in, op, "indices");
  check_cuda(dx, op, "dx");
  check_same_device(dout_in, dx, op);
  check_same_device(indices_in, dx, op);
  KILN_CHECK(dout_in.dim() == 4 && dx.dim() == 4, "maxpool2d_backward: dout and dx must be 4-D, got ",
             shape_str(dout_in.shape()), " and ", shape_str(dx.shape()));
  check_shape(indices_in, dout_in.shape(), op, "indices");
  check_dtype(indices_in, DType::i32, op, "indices");
  check_dtype(dout_in, dx.dtype(), op, "dout");
  KILN_CHECK(dx.size(0) == dout_in.size(0) && dx.size(1) == dout_in.size(1), "maxpool2d_backward: dx ",
             shape_str(dx.shape()), " and dout ", shape_str(dout_in.shape()), " differ in N or C");
  check_floating(dx, op, "dx");
  Tensor dx_c = dx.is_contiguous() ? dx : empty_workspace(dx.shape(), dx.dtype(), dx.device());
  fill(dx_c, 0.0);
  const int64_t total = dout_in.numel();
  if (total > 0) {
    Tensor dout = contiguous_or_copy(dout_in), indices = contiguous_or_copy(indices_in);
    const int dev = dx.device().index;
    DeviceGuard guard(dev);
    const int64_t per_plane = dout.size(2) * dout.size(3), plane_size = dx.size(2) * dx.size(3);
    dispatch_floating(dx.dtype(), op, [&]<typename T>() {
      maxpool2d_backward_kernel<T><<<grid_for(total, 256, dev), 256, 0, stream_for(dev)>>>(
          ptr<const T>(dout), ptr<const int32_t>(indices), ptr<T>(dx_c), per_plane, total, plane_size);
    });
    KILN_CUDA_CHECK_LAUNCH();
  }
  if (!dx.is_contiguous()) copy_on_device(dx_c, dx);
}

}  // namespace kiln::cuda
