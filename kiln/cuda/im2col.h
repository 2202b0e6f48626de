// Shared by conv2d.cpp (the GEMM side) and im2col.cu (the gather kernels).
#pragma once
#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::cuda {

struct ConvGeometry {
  int64_t cin, h, w;  // input channels and size
  int64_t kh, kw;     // kernel
  int64_t sh, sw, ph, pw;
  int64_t oh, ow;  // output size
};

// col [images, Cin*KH*KW, OH*OW] from images [first, first + images) of x
// (contiguous NCHW).
void im2col(const Tensor& x, Tensor& col, const ConvGeometry& g, int64_t first_image, int64_t images);
// Images [first, first + images) of dx (contiguous NCHW) from their col
// gradient; writes every element of those images.
void col2im(const Tensor& col, Tensor& dx, const ConvGeometry& g, int64_t first_image, int64_t images);

}  // namespace kiln::cuda
