// 2-D max pooling over x [N, C, H, W] (no padding), and its backward.
//
// Forward records, for every output, the flat position h*W + w of the max
// inside its (n, c) plane; backward scatters dout there. Ties keep the first
// position in row-major window order, and a NaN wins (as in PyTorch: the
// last NaN of the window), so NaNs propagate instead of being dropped.
//
// Both directions are parallel over planes: a plane's outputs only ever touch
// that plane, so overlapping windows (stride < kernel) need no atomics and
// each dx element is summed in a fixed order.
#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kParallelElements = 32768;

void check_4d(const char* op, const Tensor& t, const char* what) {
  check_cpu(t, op);
  check_contiguous(t, op, what);
  KILN_CHECK(t.dim() == 4, op, ": ", what, " must be [N, C, H, W], got ", shape_str(t.shape()));
}

// PyTorch's rule: a larger value or any NaN replaces the current max.
// Written as selects rather than branches: on real activations the winner is
// unpredictable, and mispredicted branches dominated the loop. The selects
// are integer masks so that the scalar remainder of a short row (a 14-wide
// plane has 7 outputs, under one AVX2 vector) has no branches either.
template <typename T>
inline void take_max(T v, int32_t pos, T& best, int32_t& best_pos) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const Bits take = Bits(0) - Bits((v > best) | (v != v));  // all ones or zero; bitwise |: no branch
  best = std::bit_cast<T>((std::bit_cast<Bits>(v) & take) | (std::bit_cast<Bits>(best) & ~take));
  best_pos = int32_t((uint32_t(pos) & uint32_t(take)) | (uint32_t(best_pos) & ~uint32_t(take)));
}

// The common 2x2 window with stride 2, unrolled and vectorised across the
// output row (`omp simd` turns the selects into blends).
template <typename T>
void pool_2x2(const T* xs, int64_t W, int64_t OH, int64_t OW, T* os, int32_t* is) {
  for (int64_t oh = 0; oh < OH; ++oh) {
    const T* row0 = xs + 2 * oh * W;
    const T* row1 = row0 + W;
    const int32_t base = int32_t(2 * oh * W);
    T* orow = os + oh * OW;
    int32_t* irow = is + oh * OW;
#pragma omp simd
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int32_t p = base + int32_t(2 * ow);
      T best = row0[2 * ow];
      int32_t best_pos = p;
      take_max(row0[2 * ow + 1], p + 1, best, best_pos);
      take_max(row1[2 * ow], p + int32_t(W), best, best_pos);
      take_max(row1[2 * ow + 1], p + int32_t(W) + 1, best, best_pos);
      orow[ow] = best;
      irow[ow] = best_pos;
    }
  }
}

// One (n, c) plane: xs [H, W] -> os [OH, OW] and is.
template <typename T>
void pool_plane(const T* xs, int64_t W, int64_t OH, int64_t OW, const Pool2dArgs& a, T* os, int32_t* is) {
  const int64_t KH = a.kernel_h, KW = a.kernel_w, SH = a.stride_h, SW = a.stride_w;
  if (KH == 2 && KW == 2 && SH == 2 && SW == 2) return pool_2x2(xs, W, OH, OW, os, is);
  for (int64_t oh = 0; oh < OH; ++oh) {
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int64_t h0 = oh * SH, w0 = ow * SW;
      int32_t best_pos = int32_t(h0 * W + w0);
      T best = xs[best_pos];
      for (int64_t kh = 0; kh < KH; ++kh) {
        const int32_t row = int32_t((h0 + kh) * W + w0);
        for (int64_t kw = 0; kw < KW; ++kw) take_max(xs[row + kw], int32_t(row + kw), best, best_pos);
      }
      os[oh * OW + ow] = best;
      is[oh * OW + ow] = best_pos;
    }
  }
}

// One plane's backward: ds [HW] = dout scattered to the recorded positions.
template <typename T>
void unpool_plane(const T* gs, const int32_t* is, int64_t OHW, int64_t HW, T* ds) {
  for (int64_t i = 0; i < HW; ++i) ds[i] = T(0);
  for (int64_t o = 0; o < OHW; ++o) ds[is[o]] += gs[o];
}

// Runs fn(plane, in, out) on each bf16 plane widened into a per-thread f32
// buffer (in_size elements) and rounds its f32 result (out_size elements)
// back once: the values staging the whole tensor would give, at a fraction
// of its memory traffic.
template <typename Fn>
void bf16_planes(const uint16_t* in, int64_t in_size, uint16_t* out, int64_t out_size, int64_t planes,
                 bool parallel, Fn&& fn) {
#pragma omp parallel if (parallel)
  {
    std::vector<float> src(static_cast<size_t>(in_size)), dst(static_cast<size_t>(out_size));
#pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      bf16_to_f32(in + pl * in_size, src.data(), in_size);
      fn(pl, src.data(), dst.data());
      f32_to_bf16(dst.data(), out + pl * out_size, out_size);
    }
  }
}

}  // namespace

void CpuBackend::maxpool2d(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dArgs& args) {
  const bool bf16 = x.dtype() == DType::bf16 && out.dtype() == DType::bf16;
  // f16: run the f32 kernel on staged copies (low_precision.h).
  if (!bf16 && any_low_precision({&x, &out}))
    return in_f32([&](F32Staging& s) { maxpool2d(s.in(x), s.out(out), indices, args); });
  const char* op = "maxpool2d";
  check_4d(op, x, "x");
  check_4d(op, out, "out");
  check_4d(op, indices, "indices");
  KILN_CHECK(args.kernel_h > 0 && args.kernel_w > 0 && args.stride_h > 0 && args.stride_w > 0, op,
             ": kernel and stride must be positive, got kernel ", args.kernel_h, "x", args.kernel_w, " stride ",
             args.stride_h, "x", args.stride_w);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  KILN_CHECK(H >= args.kernel_h && W >= args.kernel_w, op, ": input ", H, "x", W, " is smaller than the kernel ",
             args.kernel_h, "x", args.kernel_w);
  const int64_t OH = (H - args.kernel_h) / args.stride_h + 1, OW = (W - args.kernel_w) / args.stride_w + 1;
  const Shape expected = {N, C, OH, OW};
  KILN_CHECK(out.shape() == expected, op, ": out must be ", shape_str(expected), ", got ", shape_str(out.shape()));
  KILN_CHECK(indices.shape() == expected, op, ": indices must be ", shape_str(expected), ", got ",
             shape_str(indices.shape()));
  KILN_CHECK(out.dtype() == x.dtype(), op, ": out is ", dtype_name(out.dtype()), " but x is ",
             dtype_name(x.dtype()));
  KILN_CHECK(indices.dtype() == DType::i32, op, ": indices must be i32, got ", dtype_name(indices.dtype()));
  KILN_CHECK(H * W <= INT32_MAX, op, ": plane ", H, "x", W, " is too large for i32 indices");

  const int64_t planes = N * C, HW = H * W, OHW = OH * OW;
  int32_t* ip = indices.data<int32_t>();
  const bool parallel = planes > 1 && planes * HW > kParallelElements;
  if (bf16)
    return bf16_planes(bits16(x), HW, bits16(out), OHW,
                       planes, parallel, [&](int64_t pl, const float* xs, float* os) {
                         pool_plane(xs, W, OH, OW, args, os, ip + pl * OHW);
                       });
  dispatch_float(x.dtype(), op, [&]<typename T>() {
    const T* xp = x.data<T>();
    T* yp = out.data<T>();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t pl = 0; pl < planes; ++pl) pool_plane(xp + pl * HW, W, OH, OW, args, yp + pl * OHW, ip + pl * OHW);
  });
}

void CpuBackend::maxpool2d_backward(const Tensor& dout, const Tensor& indices, Tensor& dx) {
  const bool bf16 = dout.dtype() == DType::bf16 && dx.dtype() == DType::bf16;
  // f16: run the f32 kernel on staged copies (low_precision.h).
  if (!bf16 && any_low_precision({&dout, &dx}))
    return in_f32([&](F32Staging& s) { maxpool2d_backward(s.in(dout), indices, s.out(dx)); });
  const char* op = "maxpool2d_backward";
  check_4d(op, dout, "dout");
  check_4d(op, indices, "indices");
  check_4d(op, dx, "dx");
  KILN_CHECK(indices.shape() == dout.shape(), op, ": indices ", shape_str(indices.shape()), " and dout ",
             shape_str(dout.shape()), " must have the same shape");
  KILN_CHECK(indices.dtype() == DType::i32, op, ": indices must be i32, got ", dtype_name(indices.dtype()));
  KILN_CHECK(dx.dtype() == dout.dtype(), op, ": dx is ", dtype_name(dx.dtype()), " but dout is ",
             dtype_name(dout.dtype()));
  KILN_CHECK(dx.size(0) == dout.size(0) && dx.size(1) == dout.size(1), op, ": dx ", shape_str(dx.shape()),
             " and dout ", shape_str(dout.shape()), " differ in batch or channels");
  const int64_t planes = dx.size(0) * dx.size(1), HW = dx.size(2) * dx.size(3);
  const int64_t OHW = dout.size(2) * dout.size(3);
  // Indices are checked first so a corrupted tensor cannot write out of bounds
  // (their range in one vectorised pass; the first bad one only on failure).
  const int32_t* ip = indices.data<int32_t>();
  const bool parallel = planes > 1 && planes * HW > kParallelElements;
  int32_t lowest = 0, highest = 0;
#pragma omp simd reduction(min : lowest) reduction(max : highest)
  for (int64_t i = 0; i < planes * OHW; ++i) {
    lowest = std::min(lowest, ip[i]);
    highest = std::max(highest, ip[i]);
  }
  if (lowest < 0 || highest >= HW)
    for (int64_t i = 0; i < planes * OHW; ++i)
      KILN_CHECK(ip[i] >= 0 && ip[i] < HW, op, ": index ", ip[i], " at output ", i, " is outside the ",
                 dx.size(2), "x", dx.size(3), " input plane");

  if (bf16)
    return bf16_planes(bits16(dout), OHW, bits16(dx), HW,
                       planes, parallel, [&](int64_t pl, const float* gs, float* ds) {
                         unpool_plane(gs, ip + pl * OHW, OHW, HW, ds);
                       });
  dispatch_float(dx.dtype(), op, [&]<typename T>() {
    const T* g = dout.data<T>();
    T* d = dx.data<T>();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t pl = 0; pl < planes; ++pl) unpool_plane(g + pl * OHW, ip + pl * OHW, OHW, HW, d + pl * HW);
  });
}

}  // namespace kiln::cpu
