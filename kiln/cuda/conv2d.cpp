// conv2d forward and backward as im2col + batched GEMM (the matmul op).
//
//  forward   out[n] (Cout x P) = W (Cout x CKK) @ col[n] (CKK x P) + bias
//  backward  dcol[n] = W^T @ dout[n] -> dx by col2im (a gather, no atomics)
//            dW = sum_n dout[n] @ col[n]^T: a batched GEMM then a sum over
//            the batch (the reduce op), so the order is fixed
//            dbias = sum of dout over n, h, w (the reduce op)
// P = OH*OW, CKK = Cin*KH*KW. W is broadcast over the batch with stride 0.
// Images go through in chunks so the col buffer stays under 256 MiB.
//
// Why not cuDNN: it is ~1 GB of libraries that the GPU machine may not have
// at a matching version and that cannot go into the bundle; im2col + cuBLAS
// is within a small factor for the CNN sizes Kiln trains. f32 runs on TF32
// tensor cores like every f32 matmul here.
#include <algorithm>

#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/im2col.h"

namespace kiln::cuda {
namespace {

constexpr int64_t kColBudget = int64_t(256) << 20;

ConvGeometry geometry(const Tensor& x, const Tensor& weight, const Conv2dArgs& a, const char* op) {
  KILN_CHECK(x.dim() == 4, op, ": x must be [N, Cin, H, W], got ", shape_str(x.shape()));
  KILN_CHECK(weight.dim() == 4, op, ": weight must be [Cout, Cin, KH, KW], got ", shape_str(weight.shape()));
  KILN_CHECK(weight.size(1) == x.size(1), op, ": weight ", shape_str(weight.shape()), " expects ", weight.size(1),
             " input channels, x ", shape_str(x.shape()), " has ", x.size(1));
  KILN_CHECK(a.stride_h > 0 && a.stride_w > 0 && a.pad_h >= 0 && a.pad_w >= 0, op,
             ": strides must be > 0 and padding >= 0");
  ConvGeometry g{x.size(1), x.size(2), x.size(3), weight.size(2), weight.size(3), a.stride_h, a.stride_w, a.pad_h,
                 a.pad_w,   0,         0};
  KILN_CHECK(g.h + 2 * g.ph >= g.kh && g.w + 2 * g.pw >= g.kw, op, ": kernel ", g.kh, "x", g.kw,
             " is larger than the padded input ", g.h + 2 * g.ph, "x", g.w + 2 * g.pw);
  g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

// Images per chunk so that `per_image` bytes each stay within the budget.
int64_t chunk_images(int64_t n, int64_t per_image) {
  return std::clamp<int64_t>(kColBudget / std::max<int64_t>(per_image, 1), 1, std::max<int64_t>(n, 1));
}

// [images, rows, cols] view of a contiguous buffer starting at image `first`.
Tensor batch_view(const Tensor& t, int64_t first, int64_t images, int64_t rows, int64_t cols) {
  return t.as_strided({images, rows, cols}, {rows * cols, cols, 1}, t.offset() + first * rows * cols);
}

}  // namespace

void CudaBackend::conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias, Tensor& out,
                         const Conv2dArgs& args) {
  const char* op = "conv2d";
  check_cuda(x_in, op, "x");
  check_cuda(weight_in, op, "weight");
  check_cuda(out, op, "out");
  check_same_device(x_in, out, op);
  check_same_device(weight_in, out, op);
  check_floating(x_in, op, "x");
  check_dtype(weight_in, x_in.dtype(), op, "weight");
  check_dtype(out, x_in.dtype(), op, "out");
  const ConvGeometry g = geometry(x_in, weight_in, args, op);
  const int64_t N = x_in.size(0), Cout = weight_in.size(0), CKK = g.cin * g.kh * g.kw, P = g.oh * g.ow;
  check_shape(out, {N, Cout, g.oh, g.ow}, op, "out");
  if (bias.defined()) {
    check_cuda(bias, op, "bias");
    check_shape(bias, {Cout}, op, "bias");
    check_dtype(bias, x_in.dtype(), op, "bias");
  }
  if (out.numel() == 0) return;
  if (!out.is_contiguous()) {
    Tensor tmp = empty_workspace(out.shape(), out.dtype(), out.device());
    conv2d(x_in, weight_in, bias, tmp, args);
    copy_on_device(tmp, out);
    return;
  }
  DeviceGuard guard(out.device().index);
  Tensor x = contiguous_or_copy(x_in), weight = contiguous_or_copy(weight_in);
  const int64_t chunk = chunk_images(N, CKK * P * int64_t(x.element_size()));
  Tensor col = empty_workspace({chunk, CKK, P}, x.dtype(), x.device());
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nb = std::min(chunk, N - n0);
    Tensor col_b = batch_view(col, 0, nb, CKK, P);
    im2col(x, col_b, g, n0, nb);
    Tensor w_b = weight.as_strided({nb, Cout, CKK}, {0, CKK, 1}, weight.offset());
    Tensor out_b = batch_view(out, n0, nb, Cout, P);
    matmul(w_b, col_b, out_b, MatmulArgs{});
  }
  if (bias.defined()) {  // out += bias[c], broadcast over n, h, w
    Tensor b = bias.as_strided(out.shape(), {0, bias.stride(0), 0, 0}, bias.offset());
    binary(BinaryOp::add, out, b, out);
  }
}

void CudaBackend::conv2d_backward(const Tensor& dout_in, const Tensor& x_in, const Tensor& weight_in, Tensor& dx,
                                  Tensor& dweight, Tensor& dbias, const Conv2dArgs& args) {
  const char* op = "conv2d_backward";
  check_cuda(dout_in, op, "dout");
  check_cuda(x_in, op, "x");
  check_cuda(weight_in, op, "weight");
  check_same_device(dout_in, x_in, op);
  check_same_device(weight_in, x_in, op);
  check_floating(x_in, op, "x");
  check_dtype(weight_in, x_in.dtype(), op, "weight");
  check_dtype(dout_in, x_in.dtype(), op, "dout");
  const ConvGeometry g = geometry(x_in, weight_in, args, op);
  const int64_t N = x_in.size(0), Cout = weight_in.size(0), CKK = g.cin * g.kh * g.kw, P = g.oh * g.ow;
  check_shape(dout_in, {N, Cout, g.oh, g.ow}, op, "dout");
  for (Tensor* t : {&dx, &dweight, &dbias}) {
    if (!t->defined()) continue;
    check_cuda(*t, op, "gradient");
    check_same_device(*t, x_in, op);
    check_dtype(*t, x_in.dtype(), op, "gradient");
  }
  if (dx.defined()) check_shape(dx, x_in.shape(), op, "dx");
  if (dweight.defined()) check_shape(dweight, weight_in.shape(), op, "dweight");
  if (dbias.defined()) check_shape(dbias, {Cout}, op, "dbias");
  DeviceGuard guard(x_in.device().index);

  if (dbias.defined()) {
    Tensor db = dbias.as_strided({1, Cout, 1, 1}, {0, dbias.stride(0), 0, 0}, dbias.offset());
    if (N * P == 0)
      fill(dbias, 0.0);
    else
      reduce(ReduceOp::sum, dout_in, db);
  }
  if (!dx.defined() && !dweight.defined()) return;
  if (N == 0 || CKK == 0) {
    if (dweight.defined()) fill(dweight, 0.0);
    return;
  }
  if (P == 0) {  // no output positions: nothing flows back
    if (dx.defined()) fill(dx, 0.0);
    if (dweight.defined()) fill(dweight, 0.0);
    return;
  }
  Tensor x = contiguous_or_copy(x_in), weight = contiguous_or_copy(weight_in), dout = contiguous_or_copy(dout_in);
  Tensor dx_c = dx.defined() && !dx.is_contiguous() ? empty_workspace(dx.shape(), dx.dtype(), dx.device()) : dx;
  const size_t es = x.element_size();
  const int64_t per_image = (CKK * P + (dweight.defined() ? Cout * CKK : 0)) * int64_t(es);
  const int64_t chunk = chunk_images(N, per_image);
  Tensor col = empty_workspace({chunk, CKK, P}, x.dtype(), x.device());
  Tensor dw_batch = dweight.defined() ? empty_workspace({chunk, Cout, CKK}, x.dtype(), x.device()) : Tensor();
  Tensor dw_part = dweight.defined() && chunk < N ? empty_workspace({1, Cout, CKK}, x.dtype(), x.device()) : Tensor();
  Tensor dw_view = dweight.defined() ? dweight.as_strided({1, Cout, CKK}, {0, CKK, 1}, dweight.offset()) : Tensor();
  if (dweight.defined() && !dweight.is_contiguous()) dw_view = empty_workspace({1, Cout, CKK}, x.dtype(), x.device());

  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nb = std::min(chunk, N - n0);
    Tensor col_b = batch_view(col, 0, nb, CKK, P);
    Tensor dout_b = batch_view(dout, n0, nb, Cout, P);
    if (dx_c.defined()) {
      Tensor wt = weight.as_strided({nb, CKK, Cout}, {0, 1, CKK}, weight.offset());  // W^T, broadcast
      matmul(wt, dout_b, col_b, MatmulArgs{});                                       // col_b now holds dcol
      col2im(col_b, dx_c, g, n0, nb);
    }
    if (dweight.defined()) {
      im2col(x, col_b, g, n0, nb);
      Tensor col_t = col_b.as_strided({nb, P, CKK}, {CKK * P, 1, P}, col_b.offset());
      Tensor dw_b = batch_view(dw_batch, 0, nb, Cout, CKK);
      matmul(dout_b, col_t, dw_b, MatmulArgs{});
      if (n0 == 0) {
        reduce(ReduceOp::sum, dw_b, dw_view);
      } else {
        reduce(ReduceOp::sum, dw_b, dw_part);
        binary(BinaryOp::add, dw_view, dw_part, dw_view);
      }
    }
  }
  if (dx.defined() && !dx.is_contiguous()) copy_on_device(dx_c, dx);
  if (dweight.defined() && !dweight.is_contiguous()) {
    Tensor src = dw_view.as_strided(dweight.shape(), contiguous_strides(dweight.shape()), dw_view.offset());
    copy_on_device(src, dweight);
  }
}

}  // namespace kiln::cuda
