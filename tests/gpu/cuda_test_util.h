// Helpers for the cross-backend op tests (in the manner of ggml's
// test-backend-ops): every CUDA op is run on inputs of several shapes and
// layouts and compared with the CPU backend, the reference.
//
//  * Inputs are generated on the host, rounded to the test dtype, and given to
//    both backends with identical values and (where the op allows) identical
//    strided layouts. bf16/f16 ops are checked against the CPU running in f32
//    on the same rounded values.
//  * Outputs are poisoned with NaN (integers with a sentinel) before the op,
//    so an element the kernel forgot to write fails the comparison.
//  * Tolerances are per dtype: |got - want| <= atol + rtol * |want|.
// Nothing here uses autograd or Tensor's member conveniences: data moves with
// the CUDA backend's copy (which handles host<->device) and is read on the
// host by a small strided walker.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/backend/backend.h"

namespace kiln::cuda_test {

inline Backend& cpu() { return backend_for(Device::cpu()); }
inline Backend& gpu() { return backend_for(Device::cuda()); }

struct Tol {
  double rtol, atol;
};
inline Tol tol_for(DType t) {
  switch (t) {
    case DType::f64:
      return {1e-10, 1e-12};
    case DType::f32:
      return {1e-5, 1e-6};
    case DType::bf16:
      return {2e-2, 2e-2};
    case DType::f16:
      return {2e-3, 2e-3};
    default:
      return {0, 0};
  }
}
constexpr Tol kTf32Tol = {1e-2, 1e-2};

// The compute dtype the CPU reference runs in for a test dtype.
inline DType ref_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// ---- host-side element access (any dtype, any strides)
inline double read_element(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(base)[i];
    case DType::f64:
      return static_cast<const double*>(base)[i];
    case DType::bf16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::f16:
      return f16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::i32:
      return static_cast<const int32_t*>(base)[i];
    case DType::i64:
      return double(static_cast<const int64_t*>(base)[i]);
    case DType::u8:
      return static_cast<const uint8_t*>(base)[i];
  }
  return 0;
}

inline void write_element(void* base, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(base)[i] = float(v);
      break;
    case DType::f64:
      static_cast<double*>(base)[i] = v;
      break;
    case DType::bf16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16(float(v));
      break;
    case DType::f16:
      static_cast<uint16_t*>(base)[i] = float_to_f16(float(v));
      break;
    case DType::i32:
      static_cast<int32_t*>(base)[i] = int32_t(v);
      break;
    case DType::i64:
      static_cast<int64_t*>(base)[i] = int64_t(v);
      break;
    case DType::u8:
      static_cast<uint8_t*>(base)[i] = uint8_t(v);
      break;
  }
}

// Element offsets (in elements, from data_ptr) of a view, in row-major order.
inline std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offs(size_t(t.numel()));
  const int r = t.dim();
  std::vector<int64_t> idx(size_t(r), 0);
  for (size_t k = 0; k < offs.size(); ++k) {
    int64_t off = 0;
    for (int d = 0; d < r; ++d) off += idx[size_t(d)] * t.stride(d);
    offs[k] = off;
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < t.size(d)) break;
      idx[size_t(d)] = 0;
    }
  }
  return offs;
}

// Values of a host tensor in row-major order.
inline std::vector<double> host_values(const Tensor& t) {
  EXPECT_TRUE(t.device().is_cpu());
  std::vector<double> v;
  for (int64_t off : element_offsets(t)) v.push_back(read_element(t.data_ptr(), t.dtype(), off));
  return v;
}

inline Tensor host_from_values(const std::vector<double>& v, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  for (size_t i = 0; i < v.size(); ++i) write_element(t.data_ptr(), dtype, int64_t(i), v[i]);
  return t;
}

// A contiguous host copy of a host view in another dtype (the CPU reference's input).
inline Tensor host_cast(const Tensor& t, DType dtype) { return host_from_values(host_values(t), t.shape(), dtype); }

// Uniform values in [lo, hi), already rounded to `dtype`.
inline Tensor host_random(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = dist(gen);
  return host_from_values(v, shape, dtype);
}

inline Tensor host_random_ints(const Shape& shape, DType dtype, uint64_t seed, int64_t lo, int64_t hi) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi - 1);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = double(dist(gen));
  return host_from_values(v, shape, dtype);
}

// ---- moving data (the CUDA backend's copy handles host<->device)
inline Tensor to_gpu(const Tensor& host) {
  Tensor d = Tensor::empty(host.shape(), host.dtype(), Device::cuda());
  gpu().copy(host, d);
  return d;
}

inline Tensor to_host(const Tensor& dev) {
  Tensor h = Tensor::empty(dev.shape(), dev.dtype(), Device::cpu());
  gpu().copy(dev, h);
  return h;
}

inline double poison_value(DType t) { return dtype_is_floating(t) ? std::nan("") : -777.0; }

inline Tensor gpu_poisoned(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  gpu().fill(t, poison_value(dtype));
  return t;
}

inline Tensor cpu_empty(const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype, Device::cpu()); }

// ---- layouts: the same view over a host buffer and its device copy
enum class Layout { contiguous, transposed, sliced, expanded };
inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous:
      return "contiguous";
    case Layout::transposed:
      return "transposed";
    case Layout::sliced:
      return "sliced";
    case Layout::expanded:
      return "expanded";
  }
  return "?";
}

struct Pair {
  Tensor host, dev;  // identical values and strides
};

// A random view of `shape` with the given layout: transposed swaps the last
// two dims of the buffer, sliced takes every other element of a wider last
// dim at offset 1, expanded repeats dim 0 with stride 0.
inline Pair random_view(const Shape& shape, DType dtype, Layout layout, uint64_t seed, double lo = -1.0,
                        double hi = 1.0) {
  Shape base = shape;
  const int r = int(shape.size());
  if (layout == Layout::transposed && r >= 2) std::swap(base[size_t(r - 1)], base[size_t(r - 2)]);
  if (layout == Layout::sliced && r >= 1) base[size_t(r - 1)] = 2 * shape[size_t(r - 1)] + 1;
  if (layout == Layout::expanded && r >= 1) base[0] = 1;
  Tensor hb = host_random(base, dtype, seed, lo, hi);
  Tensor db = to_gpu(hb);
  Strides st = contiguous_strides(base);
  int64_t offset = 0;
  if (layout == Layout::transposed && r >= 2) std::swap(st[size_t(r - 1)], st[size_t(r - 2)]);
  if (layout == Layout::sliced && r >= 1) {
    st[size_t(r - 1)] = 2;
    offset = 1;
  }
  if (layout == Layout::expanded && r >= 1) st[0] = 0;
  return {hb.as_strided(shape, st, offset), db.as_strided(shape, st, offset)};
}

// ---- comparison
inline void expect_close_values(const std::vector<double>& got, const std::vector<double>& want, Tol tol,
                                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first_bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const double err = std::abs(got[i] - want[i]);
    const bool ok = both_nan || (got[i] == want[i]) || err <= tol.atol + tol.rtol * std::abs(want[i]);
    if (!ok) {
      if (bad++ == 0) first_bad = i;
      worst = std::isnan(err) ? err : std::max(worst, err);
    }
  }
  if (bad) {
    std::ostringstream os;
    os << what << ": " << bad << " of " << got.size() << " elements differ (rtol " << tol.rtol << ", atol " << tol.atol
       << "); first at flat index " << first_bad << ": cuda " << got[first_bad] << " vs cpu " << want[first_bad]
       << "; worst |diff| " << worst;
    ADD_FAILURE() << os.str();
  }
}

// Compares a CUDA result with a CPU reference (shapes must match).
inline void expect_close(const Tensor& got_dev, const Tensor& want_host, Tol tol, const std::string& what) {
  ASSERT_EQ(shape_str(got_dev.shape()), shape_str(want_host.shape())) << what;
  expect_close_values(host_values(to_host(got_dev)), host_values(want_host), tol, what);
}

inline void expect_equal(const Tensor& got_dev, const Tensor& want_host, const std::string& what) {
  expect_close(got_dev, want_host, {0, 0}, what);
}

}  // namespace kiln::cuda_test
