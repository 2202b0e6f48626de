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
#include "kiln/cpu/x86_intrinsics.h"
#ifdef KILN_X86_INTRINSICS
#define KILN_POOL_AVX512 1
#endif

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

#ifdef KILN_POOL_AVX512
// The 2x2, stride-2 window on f32 or bf16 planes with AVX-512, 16 outputs of
// a row per step (one masked step for the CNN's 14- and 7-wide rows, which
// the loop above runs mostly in scalar tails): each row's 32 inputs are
// split into even and odd columns, and the four candidates compared in
// window order with take_max's rule (larger, or NaN, replaces). bf16 values
// are compared widened in registers and moved as their own bits, so a bf16
// plane needs no f32 copy.
#define KILN_POOL_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
bool have_avx512() {
  static const bool have = isa_allows(Isa::avx512);  // KILN_MAX_ISA caps it (isa.h)
  return have;
}

KILN_POOL_TARGET inline __m512i even_lanes() {
  return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}
// Lanes [0, n) of a 16-lane vector.
inline __mmask16 first_lanes(int64_t n) { return __mmask16(n <= 0 ? 0 : n >= 16 ? 0xffff : (1u << n) - 1); }

// 16 values (the lanes of `mask`, others zero) as 32-bit lanes: f32 bits, or
// bf16 bits in the low half; and back.
KILN_POOL_TARGET inline __m512i load16(const float* p, __mmask16 mask) {
  return _mm512_castps_si512(_mm512_maskz_loadu_ps(mask, p));
}
KILN_POOL_TARGET inline __m512i load16(const uint16_t* p, __mmask16 mask) {
  return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
}
KILN_POOL_TARGET inline void store16(float* p, __mmask16 mask, __m512i v) { _mm512_mask_storeu_epi32(p, mask, v); }
KILN_POOL_TARGET inline void store16(uint16_t* p, __mmask16 mask, __m512i v) {
  _mm512_mask_cvtepi32_storeu_epi16(p, mask, v);
}
// The values of such lanes, for comparing.
KILN_POOL_TARGET inline __m512 value16(__m512i v, const float*) { return _mm512_castsi512_ps(v); }
KILN_POOL_TARGET inline __m512 value16(__m512i v, const uint16_t*) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

// take_max on 16 lanes.
KILN_POOL_TARGET inline void take_max16(__m512 v, __m512i bits, __m512i at, __m512& best, __m512i& best_bits,
                                        __m512i& best_at) {
  const __mmask16 k = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  best = _mm512_mask_mov_ps(best, k, v);
  best_bits = _mm512_mask_mov_epi32(best_bits, k, bits);
  best_at = _mm512_mask_mov_epi32(best_at, k, at);
}

template <typename T>
KILN_POOL_TARGET void pool_2x2_avx512(const T* xs, int64_t W, int64_t OH, int64_t OW, T* os, int32_t* is) {
  const __m512i even = even_lanes(), odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t oh = 0; oh < OH; ++oh)
    for (int64_t ow = 0; ow < OW; ow += 16) {
      const int64_t n = std::min<int64_t>(16, OW - ow);
      const __mmask16 lo = first_lanes(2 * n), hi = first_lanes(2 * n - 16), out = first_lanes(n);
      const T* r0 = xs + 2 * oh * W + 2 * ow;
      const T* r1 = r0 + W;
      const __m512i a0 = load16(r0, lo), a1 = load16(r0 + 16, hi);
      const __m512i b0 = load16(r1, lo), b1 = load16(r1 + 16, hi);
      const __m512i p = _mm512_add_epi32(_mm512_set1_epi32(int32_t(2 * oh * W + 2 * ow)), even);
      __m512i best_bits = _mm512_permutex2var_epi32(a0, even, a1), pos = p;
      __m512 best = value16(best_bits, xs);
      const __m512i candidates[3] = {_mm512_permutex2var_epi32(a0, odd, a1), _mm512_permutex2var_epi32(b0, even, b1),
                                     _mm512_permutex2var_epi32(b0, odd, b1)};
      const int32_t offsets[3] = {1, int32_t(W), int32_t(W + 1)};
      for (int c = 0; c < 3; ++c)
        take_max16(value16(candidates[c], xs), candidates[c], _mm512_add_epi32(p, _mm512_set1_epi32(offsets[c])), best,
                   best_bits, pos);
      store16(os + oh * OW + ow, out, best_bits);
      _mm512_mask_storeu_epi32(is + oh * OW + ow, out, pos);
    }
}

// Backward of that window: each input of a window gets the output's
// gradient if it is the recorded position, else 0, written whole (no
// zero-fill, no scatter; bf16 gradients move as their own bits). False,
// with ds partly written, if some recorded position lies outside its
// output's 2x2 window (indices from another kernel): the caller then
// scatters.
template <typename T>
KILN_POOL_TARGET bool unpool_2x2_avx512(const T* gs, const int32_t* is, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                        T* ds) {
  if (H % 2 || W % 2) std::fill(ds, ds + H * W, T(0));  // the last row or column is in no window
  const __m512i even = even_lanes();
  const __m512i first_half = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second_half = _mm512_add_epi32(first_half, _mm512_set1_epi32(8));
  for (int64_t oh = 0; oh < OH; ++oh)
    for (int64_t ow = 0; ow < OW; ow += 16) {
      const int64_t n = std::min<int64_t>(16, OW - ow);
      const __mmask16 lo = first_lanes(2 * n), hi = first_lanes(2 * n - 16), out = first_lanes(n);
      const __m512i g = load16(gs + oh * OW + ow, out);
      const __m512i at = _mm512_maskz_loadu_epi32(out, is + oh * OW + ow);
      const __m512i p = _mm512_add_epi32(_mm512_set1_epi32(int32_t(2 * oh * W + 2 * ow)), even);
      __mmask16 covered = 0;
      for (int64_t row = 0; row < 2; ++row) {
        const __m512i left = _mm512_add_epi32(p, _mm512_set1_epi32(int32_t(row * W)));
        const __mmask16 kl = _mm512_cmpeq_epi32_mask(at, left);
        const __mmask16 kr = _mm512_cmpeq_epi32_mask(at, _mm512_add_epi32(left, _mm512_set1_epi32(1)));
        covered |= kl | kr;
        const __m512i gl = _mm512_maskz_mov_epi32(kl, g), gr = _mm512_maskz_mov_epi32(kr, g);
        T* d = ds + (2 * oh + row) * W + 2 * ow;
        store16(d, lo, _mm512_permutex2var_epi32(gl, first_half, gr));
        store16(d + 16, hi, _mm512_permutex2var_epi32(gl, second_half, gr));
      }
      if ((covered & out) != out) return false;
    }
  return true;
}
#endif

// A plane (f32, or bf16 on its own bits) through the AVX-512 kernels where
// the window is 2x2 with stride 2 and the CPU has AVX-512; false where not,
// with nothing (or, unpooling, part of ds) written.
template <typename T>
bool pool_plane_avx512(const T* xs, int64_t W, int64_t OH, int64_t OW, const Pool2dArgs& a, T* os, int32_t* is) {
#ifdef KILN_POOL_AVX512
  if (have_avx512() && a.kernel_h == 2 && a.kernel_w == 2 && a.stride_h == 2 && a.stride_w == 2)
    return pool_2x2_avx512(xs, W, OH, OW, os, is), true;
#endif
  return false;
}
template <typename T>
bool unpool_plane_avx512(const T* gs, const int32_t* is, int64_t H, int64_t W, int64_t OH, int64_t OW, T* ds) {
#ifdef KILN_POOL_AVX512
  // Outputs shaped as 2x2, stride-2 pooling's may well be (the window check decides).
  if (have_avx512() && OH == H / 2 && OW == W / 2) return unpool_2x2_avx512(gs, is, H, W, OH, OW, ds);
#endif
  return false;
}

// One (n, c) plane: xs [H, W] -> os [OH, OW] and is.
template <typename T>
void pool_plane(const T* xs, int64_t W, int64_t OH, int64_t OW, const Pool2dArgs& a, T* os, int32_t* is) {
  const int64_t KH = a.kernel_h, KW = a.kernel_w, SH = a.stride_h, SW = a.stride_w;
  if constexpr (std::is_same_v<T, float>)
    if (pool_plane_avx512(xs, W, OH, OW, a, os, is)) return;
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

// One plane's backward: ds [H, W] = dout [OH, OW] scattered to the recorded
// positions.
template <typename T>
void unpool_plane(const T* gs, const int32_t* is, int64_t H, int64_t W, int64_t OH, int64_t OW, T* ds) {
  if constexpr (std::is_same_v<T, float>)
    if (unpool_plane_avx512(gs, is, H, W, OH, OW, ds)) return;
  const int64_t HW = H * W, OHW = OH * OW;
  for (int64_t i = 0; i < HW; ++i) ds[i] = T(0);
  for (int64_t o = 0; o < OHW; ++o) ds[is[o]] += gs[o];
}

// Runs direct(plane) on each bf16 plane, and where that returns false,
// fn(plane, in, out) on the plane widened into a per-thread f32 buffer (in_size
// elements), its f32 result (out_size elements) rounded back once: the
// values staging the whole tensor would give, at a fraction of its memory
// traffic.
template <typename Direct, typename Fn>
void bf16_planes(const uint16_t* in, int64_t in_size, uint16_t* out, int64_t out_size, int64_t planes,
                 bool parallel, Direct&& direct, Fn&& fn) {
#pragma omp parallel if (parallel)
  {
    std::vector<float> src, dst;
#pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      if (direct(pl)) continue;
      src.resize(static_cast<size_t>(in_size));
      dst.resize(static_cast<size_t>(out_size));
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
  if (bf16) {
    const uint16_t* xp = bits16(x);
    uint16_t* yp = bits16(out);
    return bf16_planes(
        xp, HW, yp, OHW, planes, parallel,
        [&](int64_t pl) { return pool_plane_avx512(xp + pl * HW, W, OH, OW, args, yp + pl * OHW, ip + pl * OHW); },
        [&](int64_t pl, const float* xs, float* os) { pool_plane(xs, W, OH, OW, args, os, ip + pl * OHW); });
  }
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
  const int64_t planes = dx.size(0) * dx.size(1), H = dx.size(2), W = dx.size(3), HW = H * W;
  const int64_t OH = dout.size(2), OW = dout.size(3), OHW = OH * OW;
  // Indices are checked first so a corrupted tensor cannot write out of bounds
  // (their range in one vectorised pass over the pool; the first bad one only
  // on failure).
  const int32_t* ip = indices.data<int32_t>();
  const bool parallel = planes > 1 && planes * HW > kParallelElements;
  int32_t lowest = 0, highest = 0;
#pragma omp parallel for simd reduction(min : lowest) reduction(max : highest) if (parallel)
  for (int64_t i = 0; i < planes * OHW; ++i) {
    lowest = std::min(lowest, ip[i]);
    highest = std::max(highest, ip[i]);
  }
  if (lowest < 0 || highest >= HW)
    for (int64_t i = 0; i < planes * OHW; ++i)
      KILN_CHECK(ip[i] >= 0 && ip[i] < HW, op, ": index ", ip[i], " at output ", i, " is outside the ",
                 dx.size(2), "x", dx.size(3), " input plane");

  if (bf16) {
    const uint16_t* gp = bits16(dout);
    uint16_t* dp = bits16(dx);
    return bf16_planes(
        gp, OHW, dp, HW, planes, parallel,
        [&](int64_t pl) { return unpool_plane_avx512(gp + pl * OHW, ip + pl * OHW, H, W, OH, OW, dp + pl * HW); },
        [&](int64_t pl, const float* gs, float* ds) { unpool_plane(gs, ip + pl * OHW, H, W, OH, OW, ds); });
  }
  dispatch_float(dx.dtype(), op, [&]<typename T>() {
    const T* g = dout.data<T>();
    T* d = dx.data<T>();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t pl = 0; pl < planes; ++pl) unpool_plane(g + pl * OHW, ip + pl * OHW, H, W, OH, OW, d + pl * HW);
  });
}

}  // namespace kiln::cpu
