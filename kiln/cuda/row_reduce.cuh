// Reductions over one row shared by a group of threads: a warp (GROUP = 32,
// several rows per block) or a whole block (GROUP = blockDim.x, one row per
// block). Used by the row-wise kernels: softmax, cross-entropy, layernorm.
#pragma once
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda {

// Every thread of the group gets the result. GROUP > 32 needs a __shared__
// scratch of 32 values and blockDim.x == GROUP.
template <int GROUP, typename A>
__device__ __forceinline__ A group_sum(A v, A* scratch) {
  if constexpr (GROUP == 32)
    return warp_sum(v);
  else
    return block_sum(v, scratch);
}

template <int GROUP, typename A>
__device__ __forceinline__ A group_max(A v, A* scratch) {
  if constexpr (GROUP == 32)
    return warp_max(v);
  else
    return block_max(v, scratch);
}

// Row index and thread-in-row for a 1-D block of 256 threads.
template <int GROUP>
struct RowSlot {
  int64_t row;
  int lane;  // 0 .. GROUP-1
  __device__ RowSlot() {
    constexpr int rows_per_block = 256 / GROUP;
    row = blockIdx.x * int64_t(rows_per_block) + threadIdx.x / GROUP;
    lane = threadIdx.x % GROUP;
  }
};

}  // namespace kiln::cuda
