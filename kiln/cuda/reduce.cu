// sum / mean / max / min over any set of dims, and argmax over one dim.
//
// The input is split into kept dims (one output each, index m) and reduced
// dims (index r); both sides are collapsed with make_layout, so any strides
// work. Two kernels, chosen by which side is contiguous in memory:
//  reduce_rows_kernel     a warp per (output, chunk of r); lanes walk r, so
//                         reads are coalesced when the reduced dims are
//                         innermost (softmax-style rows, "sum all").
//  reduce_columns_kernel  a 32x8 block per (32 outputs, chunk of r); the 32
//                         lanes are 32 neighbouring outputs, so reads are
//                         coalesced when the kept dims are innermost.
//  reduce_dense_columns_kernel  the same for a dense [R, M] -> [1, M] (bias
//                         gradients), each lane owning 16 bytes of
//                         neighbouring outputs read with one load per row: a
//                         warp reads 512 contiguous bytes, not 64 or 128.
// When there are too few outputs to fill the GPU, r is split into S chunks
// whose partials (f32, f64 for f64) are combined in a fixed order by
// reduce_finalize_kernel: results are deterministic, no atomics.
#include <algorithm>
#include <cmath>

#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"
#include "kiln/cuda/strided.h"

namespace kiln::cuda {
namespace {

template <typename A>
__device__ __forceinline__ A identity(ReduceOp op) {
  if (op == ReduceOp::max) return neg_infinity<A>();
  if (op == ReduceOp::min) return -neg_infinity<A>();
  return A(0);
}

// max/min propagate NaN (as the CPU does): b wins if it is larger or NaN, and
// a NaN already in a is never replaced.
template <typename A>
__device__ __forceinline__ A combine(ReduceOp op, A a, A b) {
  if (op == ReduceOp::max) return (b > a || b != b) ? b : a;
  if (op == ReduceOp::min) return (b < a || b != b) ? b : a;
  return a + b;
}

template <typename A>
__device__ __forceinline__ A warp_combine(ReduceOp op, A v) {
  for (int o = 16; o > 0; o >>= 1) v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Writes a finished value, or a partial when the reduction is split.
template <typename T, typename A>
__device__ __forceinline__ void store_result(ReduceOp op, A v, int64_t m, int s, int splits, int64_t out_offset, T* out,
                                             A* partial, int64_t r_total) {
  if (splits > 1) {
    partial[m * splits + s] = v;
  } else {
    if (op == ReduceOp::mean) v = v / A(r_total);
    out[out_offset] = from_acc<T>(v);
  }
}

struct ReduceGeometry {
  StridedLayout<2> kept;     // per output: {x offset, out offset}
  StridedLayout<1> reduced;  // per reduced element: x offset
  int64_t m_total, r_total, chunk;
  int splits;
};

template <typename T>
__global__ void reduce_rows_kernel(const T* x, T* out, Acc<T>* partial, ReduceGeometry g, ReduceOp op) {
  using A = Acc<T>;
  const int lane = threadIdx.x % 32;
  const int64_t w = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (w >= g.m_total * g.splits) return;
  const int64_t m = w / g.splits;
  const int s = int(w % g.splits);
  int64_t base[2];
  g.kept.offsets(m, base);
  const int64_t r_end = min(g.r_total, (s + 1) * g.chunk);
  A acc = identity<A>(op);
  for (int64_t r = s * g.chunk + lane; r < r_end; r += 32) {
    int64_t off[1];
    g.reduced.offsets(r, off);
    acc = combine(op, acc, to_acc(x[base[0] + off[0]]));
  }
  acc = warp_combine(op, acc);
  if (lane == 0) store_result(op, acc, m, s, g.splits, base[1], out, partial, g.r_total);
}

// blockDim = (32, 8); blockIdx.x picks 32 outputs, blockIdx.y the chunk.
template <typename T>
__global__ void reduce_columns_kernel(const T* x, T* out, Acc<T>* partial, ReduceGeometry g, ReduceOp op) {
  using A = Acc<T>;
  __shared__ A scratch[8][33];
  const int64_t m = blockIdx.x * int64_t(32) + threadIdx.x;
  const int s = blockIdx.y;
  A acc = identity<A>(op);
  int64_t base[2] = {0, 0};
  if (m < g.m_total) {
    g.kept.offsets(m, base);
    const int64_t r_end = min(g.r_total, (s + 1) * g.chunk);
    for (int64_t r = s * g.chunk + threadIdx.y; r < r_end; r += 8) {
      int64_t off[1];
      g.reduced.offsets(r, off);
      acc = combine(op, acc, to_acc(x[base[0] + off[0]]));
    }
  }
  scratch[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && m < g.m_total) {
    for (int y = 1; y < 8; ++y) acc = combine(op, acc, scratch[y][threadIdx.x]);
    store_result(op, acc, m, s, g.splits, base[1], out, partial, g.r_total);
  }
}

// blockDim = (32, 8); blockIdx.x picks 32 * kVec outputs, blockIdx.y the
// chunk of rows. x is a dense [r_total, m_total], 16-byte aligned, m_total a
// multiple of kVec; out is dense.
template <typename T>
__global__ void reduce_dense_columns_kernel(const T* x, T* out, Acc<T>* partial, ReduceGeometry g, ReduceOp op) {
  using A = Acc<T>;
  constexpr int kVec = 16 / sizeof(T);
  __shared__ A scratch[8][32 * kVec + 1];
  const int64_t m0 = (blockIdx.x * int64_t(32) + threadIdx.x) * kVec;
  const int s = blockIdx.y;
  A acc[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc[i] = identity<A>(op);
  if (m0 < g.m_total) {
    const int64_t r_end = min(g.r_total, (s + 1) * g.chunk);
    for (int64_t r = s * g.chunk + threadIdx.y; r < r_end; r += 8) {
      const uint4 v = *reinterpret_cast<const uint4*>(x + r * g.m_total + m0);
      const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[i] = combine(op, acc[i], to_acc(e[i]));
    }
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) scratch[threadIdx.y][threadIdx.x * kVec + i] = acc[i];
  __syncthreads();
  // The block's 256 threads finish its 32 * kVec outputs, each adding the 8 row lanes in order.
  for (int c = threadIdx.y * 32 + threadIdx.x; c < 32 * kVec; c += 256) {
    const int64_t m = blockIdx.x * int64_t(32 * kVec) + c;
    if (m >= g.m_total) continue;
    A a = scratch[0][c];
    for (int y = 1; y < 8; ++y) a = combine(op, a, scratch[y][c]);
    store_result(op, a, m, s, g.splits, m, out, partial, g.r_total);
  }
}

template <typename T>
__global__ void reduce_finalize_kernel(const Acc<T>* partial, T* out, ReduceGeometry g, ReduceOp op) {
  using A = Acc<T>;
  for (int64_t m = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; m < g.m_total;
       m += int64_t(gridDim.x) * blockDim.x) {
    A acc = partial[m * g.splits];
    for (int s = 1; s < g.splits; ++s) acc = combine(op, acc, partial[m * g.splits + s]);
    if (op == ReduceOp::mean) acc = acc / A(g.r_total);
    int64_t base[2];
    g.kept.offsets(m, base);
    out[base[1]] = from_acc<T>(acc);
  }
}

// A warp per output; ties go to the lowest index, as a sequential scan would.
template <typename T>
__global__ void argmax_kernel(const T* x, int64_t* out, StridedLayout<2> kept, int64_t m_total, int64_t n,
                              int64_t stride) {
  using A = Acc<T>;
  const int lane = threadIdx.x % 32;
  const int64_t m = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (m >= m_total) return;
  int64_t base[2];
  kept.offsets(m, base);
  A best = neg_infinity<A>();
  int64_t best_i = n;  // n: this lane has seen nothing yet
  for (int64_t i = lane; i < n; i += 32) {
    A v = to_acc(x[base[0] + i * stride]);
    if (best_i == n || v > best || (v != v && best == best)) {  // the first NaN is the max, as torch.argmax
      best = v;
      best_i = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    A ov = __shfl_xor_sync(0xffffffffu, best, o);
    int64_t oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    const bool o_nan = ov != ov, b_nan = best != best;
    const bool o_wins = (o_nan && !b_nan) || (!b_nan && ov > best) || ((ov == best || (o_nan && b_nan)) && oi < best_i);
    if (oi < n && (best_i == n || o_wins)) {
      best = ov;
      best_i = oi;
    }
  }
  if (lane == 0) out[base[1]] = best_i == n ? 0 : best_i;
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& x, Tensor& out) {
  check_cuda(x, "reduce", "x");
  check_cuda(out, "reduce", "out");
  check_same_device(x, out, "reduce");
  check_dtype(out, x.dtype(), "reduce", "out");
  KILN_CHECK(out.dim() == x.dim(), "reduce: out ", shape_str(out.shape()), " must have x's rank (",
             shape_str(x.shape()), "), with 1 in every reduced dim");
  Shape kept_shape, red_shape;
  Strides kept_x, kept_out, red_x;
  for (int d = 0; d < x.dim(); ++d) {
    if (out.size(d) == x.size(d)) {
      kept_shape.push_back(x.size(d));
      kept_x.push_back(x.stride(d));
      kept_out.push_back(out.stride(d));
    } else {
      KILN_CHECK(out.size(d) == 1, "reduce: out ", shape_str(out.shape()), " does not match x ", shape_str(x.shape()),
                 " in dim ", d, " (must be equal, or 1 to reduce)");
      red_shape.push_back(x.size(d));
      red_x.push_back(x.stride(d));
    }
  }
  ReduceGeometry g;
  g.m_total = shape_numel(kept_shape);
  g.r_total = shape_numel(red_shape);
  if (g.m_total == 0) return;
  if (g.r_total == 0) {
    KILN_CHECK(op == ReduceOp::sum || op == ReduceOp::mean, "reduce: max/min over an empty dim of ",
               shape_str(x.shape()));
    fill(out, op == ReduceOp::sum ? 0.0 : std::nan(""));
    return;
  }
  g.kept = make_layout<2>(kept_shape, {&kept_x, &kept_out});
  g.reduced = make_layout<1>(red_shape, {&red_x});
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  const int64_t target = int64_t(device_state(dev).sm_count) * 32;  // warps (or column blocks) to keep busy
  // Kept dims innermost in memory -> column kernel; otherwise rows.
  const bool columns = g.reduced.rank > 0 && g.reduced.strides[0][g.reduced.rank - 1] != 1 && g.kept.rank > 0 &&
                       g.kept.strides[0][g.kept.rank - 1] == 1;
  // Dense [R, M] -> dense [1, M] with 16-byte rows: 16 bytes per lane.
  const int64_t vec = 16 / int64_t(x.element_size());
  const bool dense_columns = columns && g.kept.rank == 1 && g.reduced.rank == 1 && g.kept.strides[1][0] == 1 &&
                             g.reduced.strides[0][0] == g.m_total && g.m_total % vec == 0 && aligned_to(x, 16);
  const int64_t units = dense_columns ? ceil_div(g.m_total, 32 * vec) : columns ? ceil_div(g.m_total, 32) : g.m_total;
  const int64_t min_chunk = dense_columns ? 256 : columns ? 64 : 1024;  // rows (elements) per split
  int64_t splits = 1;
  if (units < target)
    splits = std::clamp<int64_t>(std::min(ceil_div(g.r_total, min_chunk), ceil_div(target, units)), 1, 1024);
  g.chunk = ceil_div(g.r_total, splits);
  g.splits = int(ceil_div(g.r_total, g.chunk));
  dispatch_floating(x.dtype(), "reduce", [&]<typename T>() {
    using A = Acc<T>;
    Tensor partial;
    if (g.splits > 1)
      partial =
          empty_workspace({g.m_total * g.splits}, std::is_same_v<A, double> ? DType::f64 : DType::f32, out.device());
    A* part = g.splits > 1 ? ptr<A>(partial) : nullptr;
    if (dense_columns) {
      dim3 grid(unsigned(units), unsigned(g.splits));
      reduce_dense_columns_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(ptr<const T>(x), ptr<T>(out), part, g, op);
    } else if (columns) {
      dim3 grid(unsigned(ceil_div(g.m_total, 32)), unsigned(g.splits));
      reduce_columns_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(ptr<const T>(x), ptr<T>(out), part, g, op);
    } else {
      const int64_t warps = g.m_total * g.splits;
      reduce_rows_kernel<T>
          <<<unsigned(ceil_div(warps, 8)), 256, 0, stream>>>(ptr<const T>(x), ptr<T>(out), part, g, op);
    }
    KILN_CUDA_CHECK_LAUNCH();
    if (g.splits > 1) {
      reduce_finalize_kernel<T><<<grid_for(g.m_total, 256, dev), 256, 0, stream>>>(part, ptr<T>(out), g, op);
      KILN_CUDA_CHECK_LAUNCH();
    }
  });
}

void CudaBackend::argmax(const Tensor& x, int dim, Tensor& out) {
  check_cuda(x, "argmax", "x");
  check_cuda(out, "argmax", "out");
  check_same_device(x, out, "argmax");
  check_dtype(out, DType::i64, "argmax", "out");
  const int d = normalize_dim(dim, x.dim());
  Shape kept_shape;
  Strides kept_x;
  for (int i = 0; i < x.dim(); ++i)
    if (i != d) {
      kept_shape.push_back(x.size(i));
      kept_x.push_back(x.stride(i));
    }
  check_shape(out, kept_shape, "argmax", "out");
  const int64_t m_total = shape_numel(kept_shape), n = x.size(d);
  if (m_total == 0) return;
  KILN_CHECK(n > 0, "argmax: dim ", d, " of ", shape_str(x.shape()), " is empty");
  StridedLayout<2> kept = make_layout<2>(kept_shape, {&kept_x, &out.strides()});
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(x.dtype(), "argmax", [&]<typename T>() {
    argmax_kernel<T><<<unsigned(ceil_div(m_total, 8)), 256, 0, stream_for(dev)>>>(ptr<const T>(x), ptr<int64_t>(out),
                                                                                  kept, m_total, n, x.stride(d));
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
