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
  // Rows [begin, end): the first row's offsets from its index, the rest by
  // stepping the index like an odometer (a division per dimension per row
  // was most of the time of copies with short rows, such as merging
  // attention heads: 32 elements a row).
  auto rows = [&](int64_t begin, int64_t end) {
    Shape index(size_t(rank - 1));  // (inline: no allocation a call)
    std::array<int64_t, N> offsets{};
    for (int64_t d = rank - 2, rem = begin; d >= 0; --d) {
      index[size_t(d)] = rem % shape[d];
      rem /= shape[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += index[size_t(d)] * (*strides[k])[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      body(offsets, n_inner, inner);
      for (int d = rank - 2; d >= 0; --d) {
        for (size_t k = 0; k < N; ++k) offsets[k] += (*strides[k])[d];
        if (++index[size_t(d)] < shape[d]) break;
        for (size_t k = 0; k < N; ++k) offsets[k] -= shape[d] * (*strides[k])[d];
        index[size_t(d)] = 0;
      }
    }
  };
  // Small work runs on one thread: the fork/join would cost more.
  for_chunks_if(n_rows, n_rows > 1 && n_rows * n_inner > kParallelMinElements, rows);
}

}  // namespace kiln::cpu
