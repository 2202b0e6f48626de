// 2-D convolution over x [N, Cin, H, W] with weight [Cout, Cin, KH, KW].
// f32 goes to oneDNN's direct convolutions where the build has oneDNN
// (conv2d_dnnl.h); f64 (the gradient checks), builds without oneDNN and empty
// shapes use im2col + one GEMM per chunk of the batch, below.
//
// The whole chunk is unfolded into col [K = Cin*KH*KW, nb*OH*OW] so a single
// large GEMM replaces nb small ones: small convolutions (K = 9, Cout = 32)
// make per-image GEMMs too small to keep BLAS busy. The price is a transposed
// copy between GEMM layout [Cout, nb*P] and NCHW [nb, Cout, P] (P = OH*OW),
// which is memory-bound and cheap. A chunk is sized so col stays near 4 MB.
//
//   forward:  out_n      = W @ col_n (+ bias)
//   backward: dW         = sum_n dout_n @ col_n^T     (GEMM over the chunk, beta=1 across chunks)
//             dcol       = W^T @ dout,  dx = col2im(dcol)
//             dbias[co]  = sum_{n,p} dout[n, co, p]
// Threads come from OpenBLAS alone: im2col, col2im and the layout copies run
// on the calling thread. OpenBLAS (pthreads build) keeps its own worker
// threads, which fight OpenMP workers for the cores around every GEMM.
// Measured on the Fashion-MNIST CNN shapes (2 cores): with libgomp's default
// spinning, OpenMP copies made the whole op 2-10x slower; with passive
// waiting (kiln/cpu/runtime_defaults.h) they were still no faster than serial
// copies, which are memory-bound and a fraction of the GEMM time. Every sum
// outside BLAS has a fixed order that depends only on the shapes, so results
// are bitwise reproducible run to run. (They can differ between 1 and 2+
// BLAS threads: OpenBLAS picks its blocking by thread count.)
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "kiln/cpu/conv2d_dnnl.h"
#include "kiln/cpu/bf16_paths.h"
#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/gemm.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

namespace {

// Small enough that a chunk's col (and dcol) stays in the L2/L3 caches between
// im2col and the GEMM that reads it: measured on the Fashion-MNIST CNN, 4 MB
// chunks made im2col and col2im 2-3x faster than one 64 MB chunk, while the
// GEMMs ([Cout, ~20 images * P]) stay large enough for BLAS to run at speed.
constexpr int64_t kColBytes = int64_t(4) << 20;

struct ConvGeometry {
  int64_t N, Cin, H, W, Cout, KH, KW, OH, OW, SH, SW, PH, PW;
  int64_t K() const { return Cin * KH * KW; }
  int64_t P() const { return OH * OW; }
  // Images per chunk, so that col [K, nb*P] stays near kColBytes.
  int64_t chunk(size_t elem) const {
    const int64_t per_image = std::max<int64_t>(1, K() * P() * int64_t(elem));
    return std::clamp<int64_t>(kColBytes / per_image, 1, std::max<int64_t>(N, 1));
  }
};

ConvGeometry conv_geometry(const char* op, const Tensor& x, const Tensor& weight, const Conv2dArgs& a) {
  check_cpu(x, op);
  check_cpu(weight, op);
  check_contiguous(x, op, "x");
  check_contiguous(weight, op, "weight");
  KILN_CHECK(x.dim() == 4, op, ": x must be [N, Cin, H, W], got ", shape_str(x.shape()));
  KILN_CHECK(weight.dim() == 4, op, ": weight must be [Cout, Cin, KH, KW], got ", shape_str(weight.shape()));
  KILN_CHECK(weight.dtype() == x.dtype(), op, ": weight is ", dtype_name(weight.dtype()), " but x is ",
             dtype_name(x.dtype()));
  KILN_CHECK(a.stride_h > 0 && a.stride_w > 0 && a.pad_h >= 0 && a.pad_w >= 0, op,
             ": strides must be positive and padding non-negative, got stride ", a.stride_h, "x", a.stride_w,
             " pad ", a.pad_h, "x", a.pad_w);
  ConvGeometry g{};
  g.N = x.size(0), g.Cin = x.size(1), g.H = x.size(2), g.W = x.size(3);
  g.Cout = weight.size(0), g.KH = weight.size(2), g.KW = weight.size(3);
  g.SH = a.stride_h, g.SW = a.stride_w, g.PH = a.pad_h, g.PW = a.pad_w;
  KILN_CHECK(weight.size(1) == g.Cin, op, ": weight ", shape_str(weight.shape()), " expects ", weight.size(1),
             " input channels but x ", shape_str(x.shape()), " has ", g.Cin);
  KILN_CHECK(g.H + 2 * g.PH >= g.KH && g.W + 2 * g.PW >= g.KW, op, ": padded input ", g.H + 2 * g.PH, "x",
             g.W + 2 * g.PW, " is smaller than the kernel ", g.KH, "x", g.KW);
  g.OH = (g.H + 2 * g.PH - g.KH) / g.SH + 1;
  g.OW = (g.W + 2 * g.PW - g.KW) / g.SW + 1;
  return g;
}

void check_like(const char* op, const Tensor& t, const char* what, const Shape& shape, DType dtype) {
  check_cpu(t, op);
  check_contiguous(t, op, what);
  KILN_CHECK(t.shape() == shape && t.dtype() == dtype, op, ": ", what, " must be ", shape_str(shape), " ",
             dtype_name(dtype), ", got ", t.str());
}

bool all_bf16(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->dtype() != DType::bf16) return false;
  return true;
}

}  // namespace

bool conv2d_runs_on_bf16(const Tensor& x, const Tensor& weight, std::initializer_list<const Tensor*> operands) {
  return all_bf16(operands) && dnnl_conv::usable(x.shape(), weight.shape(), DType::bf16);
}

namespace {

// db[co] = the sum of dout over images and positions, per output channel,
// in f32 (each image's plane) and f64 (across images). bf16 dout is read as
// its raw bits.
template <typename In, typename Out>
void bias_gradient(const In* dout, const ConvGeometry& g, Out* db) {
  const int64_t P = g.P();
  // Channels in parallel: each channel's sum keeps its order.
#pragma omp parallel for schedule(static) if (g.Cout > 1 && g.N * g.Cout * P > 32768)
  for (int64_t co = 0; co < g.Cout; ++co) {
    double acc = 0.0;
    for (int64_t n = 0; n < g.N; ++n) {
      const In* s = dout + (n * g.Cout + co) * P;
      std::conditional_t<std::is_same_v<In, double>, double, float> part = 0;
      if constexpr (std::is_same_v<In, uint16_t>) {
#pragma omp simd reduction(+ : part)
        for (int64_t p = 0; p < P; ++p) part += bf16_to_float(s[p]);
      } else {
#pragma omp simd reduction(+ : part)
        for (int64_t p = 0; p < P; ++p) part += s[p];
      }
      acc += double(part);
    }
    db[co] = Out(acc);
  }
}

}  // namespace

std::vector<int64_t> conv2d_scratch_elements(const Shape& x, const Shape& w, const Conv2dArgs& a, DType dtype,
                                             const ConvScratchPass& pass) {
  if (pass.backward && !pass.dx && !pass.dweight) return {};
  const size_t elem = dtype_size(dtype);
  // bf16 runs natively where oneDNN's bf16 kernels are the faster; bf16/f16
  // otherwise run in f32 (low_precision.h).
  const DType kernel = dnnl_conv::usable(x, w, dtype) ? dtype : elem == 8 ? DType::f64 : DType::f32;
  if (dnnl_conv::usable(x, w, kernel)) {
    std::vector<int64_t> sizes;
    for (int64_t bytes : dnnl_conv::scratch_bytes(x, w, a, pass, kernel))
      sizes.push_back((bytes + 3) / 4 * 4 / int64_t(elem));
    return sizes;
  }
  ConvGeometry g{};
  g.N = x[0], g.Cin = x[1], g.H = x[2], g.W = x[3], g.Cout = w[0], g.KH = w[2], g.KW = w[3];
  g.OH = (g.H + 2 * a.pad_h - g.KH) / a.stride_h + 1;
  g.OW = (g.W + 2 * a.pad_w - g.KW) / a.stride_w + 1;
  if (g.N == 0 || g.Cout == 0 || g.P() == 0) return {};
  const int64_t chunk = g.chunk(elem), images = std::min(chunk, g.N);
  std::vector<int64_t> sizes{g.K() * images * g.P()};
  if (chunk > 1) sizes.push_back(g.Cout * images * g.P());
  return sizes;
}

namespace {

// Scratch on the op's own device (a simulated cpu:N device counts it too).
Tensor workspace(int64_t numel, const Tensor& like) {
  MemoryCategoryScope scope(MemoryCategory::workspace);
  return Tensor::empty({numel}, like.dtype(), like.device());
}

// The output columns [lo, hi) whose input column ow*SW - PW + kw lies inside [0, W).
inline void valid_range(int64_t out_len, int64_t in_len, int64_t stride, int64_t pad, int64_t k, int64_t& lo,
                        int64_t& hi) {
  const int64_t shift = k - pad;  // input index = o*stride + shift
  lo = shift >= 0 ? 0 : (-shift + stride - 1) / stride;
  hi = in_len - shift <= 0 ? 0 : std::min(out_len, (in_len - shift + stride - 1) / stride);
  lo = std::min(lo, hi);
}

// One (image, channel, kh, kw) block of col: the input plane shifted by
// (kh - PH, kw - PW), sampled at the strides, zero outside the plane.
// Blocks are small (a 14x14 plane is 196 values) and there are Cin*KH*KW*N
// of them, so per-row overheads matter: the padding columns are zeroed with
// strided loops rather than a memset call per row.
template <typename T>
void im2col_block(const ConvGeometry& g, const T* plane, int64_t kh, int64_t kw, T* dst) {
  int64_t lo, hi, row_lo, row_hi;
  valid_range(g.OW, g.W, g.SW, g.PW, kw, lo, hi);
  valid_range(g.OH, g.H, g.SH, g.PH, kh, row_lo, row_hi);
  const int64_t shift = kw - g.PW;  // output column ow reads input column ow*SW + shift
  std::fill(dst, dst + row_lo * g.OW, T(0));
  std::fill(dst + row_hi * g.OW, dst + g.OH * g.OW, T(0));
  if (g.SH == 1 && g.SW == 1 && g.OW == g.W && hi > lo) {
    // "Same" convolution: the valid rows are one contiguous run of the
    // plane, so copy it in one go; the padding columns, which picked up
    // values from the neighbouring row, are zeroed below.
    const int64_t first = row_lo * g.OW + lo, last = (row_hi - 1) * g.OW + hi;  // [first, last) in dst
    const int64_t offset = (kh - g.PH) * g.W + shift;                          // dst[e] = plane[e + offset]
    if (row_hi > row_lo) std::memcpy(dst + first, plane + first + offset, size_t(last - first) * sizeof(T));
  } else {
    for (int64_t oh = row_lo; oh < row_hi; ++oh) {
      T* d = dst + oh * g.OW;
      const T* src = plane + (oh * g.SH - g.PH + kh) * g.W;
      if (g.SW == 1) {
#pragma omp simd
        for (int64_t ow = lo; ow < hi; ++ow) d[ow] = src[ow + shift];
      } else {
        for (int64_t ow = lo; ow < hi; ++ow) d[ow] = src[ow * g.SW + shift];
      }
    }
  }
  // Padding columns of the valid rows (valid_range guarantees lo <= hi).
  for (int64_t ow = 0; ow < lo; ++ow)
    for (int64_t oh = row_lo; oh < row_hi; ++oh) dst[oh * g.OW + ow] = T(0);
  for (int64_t ow = hi; ow < g.OW; ++ow)
    for (int64_t oh = row_lo; oh < row_hi; ++oh) dst[oh * g.OW + ow] = T(0);
}

// col[k, b*P + p] for images [n0, n0+nb): row k = (ci, kh, kw).
template <typename T>
void im2col(const ConvGeometry& g, const T* x, int64_t n0, int64_t nb, T* col) {
  const int64_t K = g.K(), P = g.P(), M = nb * P;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t ci = k / (g.KH * g.KW), kh = (k / g.KW) % g.KH, kw = k % g.KW;
    for (int64_t b = 0; b < nb; ++b)
      im2col_block(g, x + ((n0 + b) * g.Cin + ci) * g.H * g.W, kh, kw, col + k * M + b * P);
  }
}

// dx[n0+b, ci] = sum over (kh, kw, oh, ow) of dcol scattered back: each
// (image, channel) plane only receives from its own rows, so planes run in
// parallel and each element is summed in the same order every time.
template <typename T>
void col2im(const ConvGeometry& g, const T* dcol, int64_t n0, int64_t nb, T* dx) {
  const int64_t P = g.P(), M = nb * P, HW = g.H * g.W;
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t ci = 0; ci < g.Cin; ++ci) {
      T* plane = dx + ((n0 + b) * g.Cin + ci) * HW;
      std::fill(plane, plane + HW, T(0));
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const int64_t k = (ci * g.KH + kh) * g.KW + kw;
          const T* src = dcol + k * M + b * P;
          int64_t lo, hi;
          valid_range(g.OW, g.W, g.SW, g.PW, kw, lo, hi);
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            const int64_t ih = oh * g.SH - g.PH + kh;
            if (ih < 0 || ih >= g.H) continue;
            T* d = plane + ih * g.W;
            const int64_t shift = kw - g.PW;
            const T* s = src + oh * g.OW;
            if (g.SW == 1) {
#pragma omp simd
              for (int64_t ow = lo; ow < hi; ++ow) d[ow + shift] += s[ow];
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) d[ow * g.SW + shift] += s[ow];
            }
          }
        }
      }
    }
  }
}

}  // namespace

void CpuBackend::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                        const Conv2dArgs& args) {
  const bool native_bf16 = conv2d_runs_on_bf16(x, weight, {&x, &weight, &out});
  // bf16/f16 otherwise: run the f32 kernel on staged copies (low_precision.h).
  if (!native_bf16 && any_low_precision({&x, &weight, &bias, &out}))
    return in_f32([&](F32Staging& s) { conv2d(s.in(x), s.in(weight), s.in(bias), s.out(out), args); });
  const char* op = "conv2d";
  const ConvGeometry g = conv_geometry(op, x, weight, args);
  check_like(op, out, "out", {g.N, g.Cout, g.OH, g.OW}, x.dtype());
  if (bias.defined()) check_like(op, bias, "bias", {g.Cout}, native_bf16 ? bias.dtype() : x.dtype());
  if (native_bf16)  // oneDNN's bf16 kernels take an f32 bias
    return in_f32([&](F32Staging& s) { dnnl_conv::forward(x, weight, s.in(bias), out, args); });
  const int64_t K = g.K(), P = g.P();
  if (dnnl_conv::usable(x.shape(), weight.shape(), x.dtype())) return dnnl_conv::forward(x, weight, bias, out, args);
  if (g.N == 0 || g.Cout == 0 || P == 0) return;
  const int64_t chunk = g.chunk(x.element_size());

  dispatch_float(x.dtype(), op, [&]<typename T>() {
    const T* xp = x.data<T>();
    const T* wp = weight.data<T>();
    const T* bp = bias.defined() ? bias.data<T>() : nullptr;
    T* yp = out.data<T>();
    Tensor col_t = workspace(K * std::min(chunk, g.N) * P, x);
    // With one image per chunk the GEMM writes NCHW directly; otherwise it
    // writes [Cout, nb*P] into tmp, copied out below.
    Tensor tmp_t = chunk > 1 ? workspace(g.Cout * std::min(chunk, g.N) * P, x) : Tensor();
    T* col = col_t.data<T>();
    for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
      const int64_t nb = std::min(chunk, g.N - n0), M = nb * P;
      im2col(g, xp, n0, nb, col);
      T* dst = nb == 1 ? yp + n0 * g.Cout * P : tmp_t.data<T>();
      if (K == 0)
        std::fill(dst, dst + g.Cout * M, T(0));
      else
        gemm(false, false, g.Cout, M, K, T(1), wp, K, col, M, T(0), dst, M);
      if (nb == 1 && !bp) continue;
      for (int64_t b = 0; b < nb; ++b) {
        for (int64_t co = 0; co < g.Cout; ++co) {
          T* o = yp + ((n0 + b) * g.Cout + co) * P;
          const T* s = nb == 1 ? o : dst + co * M + b * P;
          const T add = bp ? bp[co] : T(0);
#pragma omp simd
          for (int64_t p = 0; p < P; ++p) o[p] = s[p] + add;
        }
      }
    }
  });
}

void CpuBackend::conv2d_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, Tensor& dx,
                                 Tensor& dweight, Tensor& dbias, const Conv2dArgs& args) {
  const bool native_bf16 = conv2d_runs_on_bf16(x, weight, {&dout, &x, &weight, &dx, &dweight});
  // bf16/f16 otherwise: run the f32 kernel on staged copies (low_precision.h).
  if (!native_bf16 && any_low_precision({&dout, &x, &weight, &dx, &dweight, &dbias}))
    return in_f32([&](F32Staging& s) {
      conv2d_backward(s.in(dout), s.in(x), s.in(weight), s.out(dx), s.out(dweight), s.out(dbias), args);
    });
  const char* op = "conv2d_backward";
  const ConvGeometry g = conv_geometry(op, x, weight, args);
  check_like(op, dout, "dout", {g.N, g.Cout, g.OH, g.OW}, x.dtype());
  if (dx.defined()) check_like(op, dx, "dx", x.shape(), x.dtype());
  if (dweight.defined()) check_like(op, dweight, "dweight", weight.shape(), x.dtype());
  if (dbias.defined()) check_like(op, dbias, "dbias", {g.Cout}, native_bf16 ? dbias.dtype() : x.dtype());
  const int64_t K = g.K(), P = g.P();
  if (native_bf16) {
    if (dbias.defined()) {
      const uint16_t* dout_bits = bits16(dout);
      in_f32([&](F32Staging& s) { bias_gradient(dout_bits, g, s.out(dbias).data<float>()); });
    }
    return dnnl_conv::backward(dout, x, weight, dx, dweight, args);
  }

  dispatch_float(x.dtype(), op, [&]<typename T>() {
    const T* gp = dout.data<T>();
    const T* xp = x.data<T>();
    const T* wp = weight.data<T>();

    if (dbias.defined()) bias_gradient(gp, g, dbias.data<T>());
    if (!dx.defined() && !dweight.defined()) return;
    if (dnnl_conv::usable(x.shape(), weight.shape(), x.dtype()))
      return dnnl_conv::backward(dout, x, weight, dx, dweight, args);
    T* dxp = dx.defined() ? dx.data<T>() : nullptr;
    T* dwp = dweight.defined() ? dweight.data<T>() : nullptr;
    if (g.N == 0 || P == 0 || K == 0 || g.Cout == 0) {  // degenerate: nothing flows back
      if (dwp) std::fill(dwp, dwp + weight.numel(), T(0));
      if (dxp) std::fill(dxp, dxp + x.numel(), T(0));
      return;
    }

    const int64_t chunk = g.chunk(x.element_size());
    const int64_t max_m = std::min(chunk, g.N) * P;
    Tensor col_t = workspace(K * max_m, x);  // im2col(x) for dW, then dcol for dx
    Tensor gT_t = chunk > 1 ? workspace(g.Cout * max_m, x) : Tensor();
    T* col = col_t.data<T>();
    for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
      const int64_t nb = std::min(chunk, g.N - n0), M = nb * P;
      // dout for the chunk in GEMM layout [Cout, nb*P]; for one image that is dout itself.
      const T* gT = gp + n0 * g.Cout * P;
      if (nb > 1) {
        T* buf = gT_t.data<T>();
        for (int64_t co = 0; co < g.Cout; ++co)
          for (int64_t b = 0; b < nb; ++b)
            std::memcpy(buf + co * M + b * P, gp + ((n0 + b) * g.Cout + co) * P, size_t(P) * sizeof(T));
        gT = buf;
      }
      if (dwp) {
        im2col(g, xp, n0, nb, col);
        gemm(false, true, g.Cout, K, M, T(1), gT, M, col, M, n0 == 0 ? T(0) : T(1), dwp, K);
      }
      if (dxp) {
        gemm(true, false, K, M, g.Cout, T(1), wp, K, gT, M, T(0), col, M);
        col2im(g, col, n0, nb, dxp);
      }
    }
  });
}

}  // namespace kiln::cpu
