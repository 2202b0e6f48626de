// im2col and its adjoint col2im for conv2d (conv2d.cpp), NCHW, contiguous.
//
//  im2col  col[n, (c*KH + kh)*KW + kw, oh*OW + ow] = x[n, c, oh*sh - ph + kh, ow*sw - pw + kw]
//          (0 outside the image); one thread per col element.
//  col2im  dx[n, c, ih, iw] = sum of the col entries that read (ih, iw): a
//          gather over the at most ceil(KH/sh)*ceil(KW/sw) windows covering
//          the pixel, so no atomics and a fixed summation order.
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"
#include "kiln/cuda/im2col.h"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void im2col_kernel(const T* x, T* col, ConvGeometry g, int64_t images) {
  const int64_t KK = g.kh * g.kw, CKK = g.cin * KK, P = g.oh * g.ow;
  const int64_t total = images * CKK * P;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = e % P, ck = (e / P) % CKK, n = e / (P * CKK);
    const int64_t c = ck / KK, kh = (ck / g.kw) % g.kh, kw = ck % g.kw;
    const int64_t ih = (p / g.ow) * g.sh - g.ph + kh, iw = (p % g.ow) * g.sw - g.pw + kw;
    const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
    col[e] = inside ? x[((n * g.cin + c) * g.h + ih) * g.w + iw] : from_acc<T>(0.0f);
  }
}

template <typename T>
__global__ void col2im_kernel(const T* col, T* dx, ConvGeometry g, int64_t images) {
  using A = Acc<T>;
  const int64_t KK = g.kh * g.kw, CKK = g.cin * KK, P = g.oh * g.ow;
  const int64_t total = images * g.cin * g.h * g.w;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t iw = e % g.w, ih = (e / g.w) % g.h, c = (e / (g.w * g.h)) % g.cin, n = e / (g.w * g.h * g.cin);
    const T* cn = col + n * CKK * P;
    A acc = 0;
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      const int64_t hh = ih + g.ph - kh;  // = oh * sh
      if (hh < 0 || hh % g.sh != 0 || hh / g.sh >= g.oh) continue;
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        const int64_t ww = iw + g.pw - kw;
        if (ww < 0 || ww % g.sw != 0 || ww / g.sw >= g.ow) continue;
        acc += to_acc(cn[((c * g.kh + kh) * g.kw + kw) * P + (hh / g.sh) * g.ow + ww / g.sw]);
      }
    }
    dx[e] = from_acc<T>(acc);
  }
}

}  // namespace

void im2col(const Tensor& x, Tensor& col, const ConvGeometry& g, int64_t first_image, int64_t images) {
  const int dev = col.device().index;
  DeviceGuard guard(dev);
  const int64_t total = images * g.cin * g.kh * g.kw * g.oh * g.ow;
  if (total == 0) return;
  dispatch_floating(x.dtype(), "conv2d", [&]<typename T>() {
    const T* xs = ptr<const T>(x) + first_image * g.cin * g.h * g.w;
    im2col_kernel<T><<<grid_for(total, 256, dev), 256, 0, stream_for(dev)>>>(xs, ptr<T>(col), g, images);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void col2im(const Tensor& col, Tensor& dx, const ConvGeometry& g, int64_t first_image, int64_t images) {
  const int dev = col.device().index;
  DeviceGuard guard(dev);
  const int64_t total = images * g.cin * g.h * g.w;
  if (total == 0) return;
  dispatch_floating(dx.dtype(), "conv2d_backward", [&]<typename T>() {
    T* dxs = ptr<T>(dx) + first_image * g.cin * g.h * g.w;
    col2im_kernel<T><<<grid_for(total, 256, dev), 256, 0, stream_for(dev)>>>(ptr<const T>(col), dxs, g, images);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
