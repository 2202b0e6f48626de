// Shared by attention.cu and attention_backward.cu: the tiling constants and
// the tile loader.
//
// Tiling: a block of 4 warps owns 16 rows (4 per warp, kept in registers) of
// one (batch, head); the other side (keys in the forward, queries in the
// dK/dV pass) streams through shared memory 32 rows at a time, lane j owning
// row j of the tile for the dot products. Each lane owns head dims
// lane + 32*i (i < 4), so D <= 128. Streamed tiles are stored with a pitch of
// D + 1: lane j reading row j column d and all lanes reading one row hit
// distinct banks either way. Compute is f32 (f64 for f64) on CUDA cores; no
// tensor cores yet.
#pragma once
#include <initializer_list>

#include "kiln/core/tensor.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda::attn {

inline bool all_contiguous(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (!t->is_contiguous()) return false;
  return true;
}

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockRows = kWarps * kRowsPerWarp;  // 16 rows owned per block
constexpr int kTile = 32;                          // streamed rows per step (one per lane)
constexpr int kDimsPerLane = 4;
constexpr int kMaxD = 32 * kDimsPerLane;  // 128

// Rows [row0, row0 + rows) of a contiguous [len, D] matrix into shared memory
// (pitch elements per row), converted to the compute type and multiplied by
// `scale`; rows past `len` are zero.
template <typename T, typename A>
__device__ __forceinline__ void load_tile(A* dst, int pitch, const T* src, int64_t row0, int rows, int64_t len, int D,
                                          A scale) {
  for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    const int64_t g = row0 + r;
    dst[r * pitch + d] = g < len ? to_acc(src[g * D + d]) * scale : A(0);
  }
}

}  // namespace kiln::cuda::attn

namespace kiln::cuda {
// Host helpers defined in attention.cu, used by both passes.
// t is on q's device with q's shape and dtype (any strides).
void check_like_q(const Tensor& t, const Tensor& q, const char* op, const char* what);
void check_attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse, const char* op);
// Opts `kernel` into `bytes` of dynamic shared memory (above the default 48 KiB).
void set_smem(const void* kernel, size_t bytes, int dev, const char* op);
}  // namespace kiln::cuda
