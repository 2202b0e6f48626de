// Walks N tensors of one shape in row-major order, parallel over rows of the
// last dimension. The body gets each operand's pointer offset (in elements)
// for the row start, the row length and each operand's stride within the row.
#pragma once
#include <array>

#include "kiln/core/shape.h"
#include "kiln/cpu/dispatch.h"

namespace kiln::cpu {

template <size_t N, typename Body>
void strided_loop(const Shape& shape, const std::array<const Strides*, N>& strides, Body&& body) {
  const int rank = int(shape.size());
  std::array<int64_t, N> inner{};
  if (rank == 0) {
    std::array<int64_t, N> offsets{};
    for (size_t k = 0; k < N; ++k) inner[k] = 1;
    body(offsets, int64_t(1), inner);
    return;
  }
  const int64_t n_inner = shape[rank - 1];
  int64_t n_rows = 1;
  for (int d = 0; d < rank - 1; ++d) n_rows *= shape[d];
  if (n_inner == 0 || n_rows == 0) return;
  for (size_t k = 0; k < N; ++k) inner[k] = (*strides[k])[rank - 1];
  // Small work runs on one thread: the fork/join would cost more.
  const bool parallel = n_rows > 1 && n_rows * n_inner > kParallelMinElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t row = 0; row < n_rows; ++row) {
    std::array<int64_t, N> offsets{};
    int64_t rem = row;
    for (int d = rank - 2; d >= 0; --d) {
      int64_t idx = rem % shape[d];
      rem /= shape[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += idx * (*strides[k])[d];
    }
    body(offsets, n_inner, inner);
  }
}

}  // namespace kiln::cpu
