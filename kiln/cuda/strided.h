// Strided addressing for N operands of one shape, passed to kernels by value.
//
// make_layout drops size-1 dims and merges adjacent dims that are contiguous
// in every operand, so a transposed or sliced view usually becomes rank 2 and
// a contiguous tensor rank 1 (the fast path). Offsets are in elements and
// 64-bit, so views of tensors with more than 2^31 elements work.
#pragma once
#include <array>
#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/core/shape.h"

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__ __forceinline__
#else
#define KILN_HD inline
#endif

namespace kiln::cuda {

constexpr int kMaxDims = 8;

template <int N>
struct StridedLayout {
  int rank = 0;  // after collapsing; 0 means a single element
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  // Element offsets of the `linear`-th element (row-major order) in each operand.
  KILN_HD void offsets(int64_t linear, int64_t (&off)[N]) const {
    if (rank == 1) {  // no 64-bit division (emulated, dozens of instructions on a GPU) for one dim
      for (int k = 0; k < N; ++k) off[k] = linear * strides[k][0];
      return;
    }
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t i = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
  }
  // True when every operand is dense and in row-major order.
  bool contiguous() const {
    if (rank == 0) return true;
    if (rank > 1) return false;
    for (int k = 0; k < N; ++k)
      if (strides[k][0] != 1) return false;
    return true;
  }
};

template <int N>
StridedLayout<N> make_layout(const Shape& shape, const std::array<const Strides*, N>& strides) {
  // Walk from the innermost dim outwards, merging a dim into the one inside it
  // when every operand steps over it as one longer dim.
  int64_t sizes[64];
  int64_t st[N][64];
  int n = 0;
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; k < N && merge; ++k) merge = (*strides[k])[d] == st[k][n - 1] * sizes[n - 1];
    if (merge) {
      sizes[n - 1] *= shape[d];
      continue;
    }
    KILN_CHECK(n < 64, "tensor rank ", shape.size(), " is too large");
    sizes[n] = shape[d];
    for (int k = 0; k < N; ++k) st[k][n] = (*strides[k])[d];
    ++n;
  }
  KILN_CHECK(n <= kMaxDims, "cuda: a view of shape ", shape_str(shape), " has ", n, " non-mergeable dims; at most ",
             kMaxDims, " are supported. Make it contiguous first.");
  StridedLayout<N> layout;
  layout.rank = n;
  for (int i = 0; i < n; ++i) {  // store outermost first
    layout.sizes[i] = sizes[n - 1 - i];
    for (int k = 0; k < N; ++k) layout.strides[k][i] = st[k][n - 1 - i];
  }
  return layout;
}

}  // namespace kiln::cuda
