// LayerNorm over the last dim, forward and backward (x [N, C] contiguous);
// RMSNorm's forward (its backward is composed of ops: kiln/autograd/ops_nn.cpp).
//
//  forward   mean = sum(x)/C, var = sum((x-mean)^2)/C (biased, two-pass),
//            rstd = 1/sqrt(var + eps), y = (x - mean) * rstd * w + b;
//            mean and rstd saved in f32 (f64 for f64 inputs).
//  backward  xhat = (x - mean) * rstd, g = dy * w,
//            dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
//            dw = sum_rows(dy * xhat), db = sum_rows(dy)  (written, not accumulated)
//
// Under autocast, f32 rows may have their output y, and so the gradient dy,
// in bf16/f16 (the dtype of the matrix product that reads y): the same
// values as y in f32 then cast, without the f32 copy and its cast (G below
// is dy's type, T the rows').
//
// Row kernels: a warp per row for C <= 1024, a 256-thread block otherwise.
// dw/db: a 32x8 block sums 32 columns over a chunk of rows into f32 partials;
// layernorm_param_finalize adds the chunks in a fixed order (deterministic,
// no atomics). An undefined weight/bias acts as 1/0; undefined dweight/dbias
// are skipped; dx may be written over dy. The backward of f32/bf16/f16 rows
// of up to 1,024 elements in 16-byte pieces (GPT-2's 768) is one pass:
// layernorm_backward_rows_kernel, below.
#include <algorithm>
#include <type_traits>

#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/row_reduce.cuh"

namespace kiln::cuda {
namespace {

template <typename T, typename O, int GROUP>
__global__ void layernorm_kernel(const T* x, const T* w, const T* b, O* y, Acc<T>* mean, Acc<T>* rstd, int64_t rows,
                                 int64_t C, float eps) {
  using A = Acc<T>;
  __shared__ A scratch[32];
  RowSlot<GROUP> slot;
  if (slot.row >= rows) return;
  const T* xr = x + slot.row * C;
  A s = 0;
  for (int64_t j = slot.lane; j < C; j += GROUP) s += to_acc(xr[j]);
  const A mu = group_sum<GROUP>(s, scratch) / A(C);
  A v = 0;
  for (int64_t j = slot.lane; j < C; j += GROUP) {
    A d = to_acc(xr[j]) - mu;
    v += d * d;
  }
  const A r = A(1) / sqrt_acc(group_sum<GROUP>(v, scratch) / A(C) + A(eps));
  O* yr = y + slot.row * C;
  for (int64_t j = slot.lane; j < C; j += GROUP) {
    A out = (to_acc(xr[j]) - mu) * r;
    if (w) out *= to_acc(w[j]);
    if (b) out += to_acc(b[j]);
    yr[j] = from_acc<O>(out);
  }
  if (slot.lane == 0) {
    mean[slot.row] = mu;
    rstd[slot.row] = r;
  }
}

// RMSNorm (backend.h): a row's sum of squares, then y rounded as transformers rounds.
template <typename T, int GROUP>
__global__ void rms_norm_kernel(const T* x, const T* w, T* y, Acc<T>* rstd, int64_t rows, int64_t C, float eps,
                                bool plus_one) {
  using A = Acc<T>;
  __shared__ A scratch[32];
  RowSlot<GROUP> slot;
  if (slot.row >= rows) return;
  const T* xr = x + slot.row * C;
  A squares = 0;
  for (int64_t j = slot.lane; j < C; j += GROUP) squares += to_acc(xr[j]) * to_acc(xr[j]);
  const A r = A(1) / sqrt_acc(group_sum<GROUP>(squares, scratch) / A(C) + A(eps));
  T* yr = y + slot.row * C;
  for (int64_t j = slot.lane; j < C; j += GROUP) {
    const A normed = to_acc(xr[j]) * r, weight = to_acc(w[j]);
    yr[j] = plus_one ? from_acc<T>(normed * (A(1) + weight)) : from_acc<T>(rounded<T>(normed) * weight);
  }
  if (slot.lane == 0) rstd[slot.row] = r;
}

template <typename T, typename G, int GROUP>
__global__ void layernorm_dx_kernel(const G* dy, const T* x, const T* w, const Acc<T>* mean, const Acc<T>* rstd, T* dx,
                                    int64_t rows, int64_t C) {
  using A = Acc<T>;
  __shared__ A scratch[32];
  RowSlot<GROUP> slot;
  if (slot.row >= rows) return;
  const int64_t base = slot.row * C;
  const A mu = mean[slot.row], r = rstd[slot.row];
  A sum_g = 0, sum_gx = 0;
  for (int64_t j = slot.lane; j < C; j += GROUP) {
    A g = to_acc(dy[base + j]) * (w ? to_acc(w[j]) : A(1));
    sum_g += g;
    sum_gx += g * (to_acc(x[base + j]) - mu) * r;
  }
  const A mean_g = group_sum<GROUP>(sum_g, scratch) / A(C);
  const A mean_gx = group_sum<GROUP>(sum_gx, scratch) / A(C);
  for (int64_t j = slot.lane; j < C; j += GROUP) {
    A g = to_acc(dy[base + j]) * (w ? to_acc(w[j]) : A(1));
    A xhat = (to_acc(x[base + j]) - mu) * r;
    dx[base + j] = from_acc<T>(r * (g - mean_g - xhat * mean_gx));
  }
}

// blockDim (32, 8); blockIdx.x: 32 columns, blockIdx.y: a chunk of rows.
// partial: [2][splits][C] -> (dy * xhat, dy) sums.
template <typename T, typename G>
__global__ void layernorm_param_partial_kernel(const G* dy, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                                               Acc<T>* partial, int64_t rows, int64_t C, int64_t chunk, int splits) {
  using A = Acc<T>;
  __shared__ A s_dw[8][33], s_db[8][33];
  const int64_t c = blockIdx.x * int64_t(32) + threadIdx.x;
  const int s = blockIdx.y;
  A dw = 0, db = 0;
  if (c < C) {
    const int64_t end = min(rows, (s + 1) * chunk);
    for (int64_t i = s * chunk + threadIdx.y; i < end; i += 8) {
      A g = to_acc(dy[i * C + c]);
      dw += g * (to_acc(x[i * C + c]) - mean[i]) * rstd[i];
      db += g;
    }
  }
  s_dw[threadIdx.y][threadIdx.x] = dw;
  s_db[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; ++k) {
      dw += s_dw[k][threadIdx.x];
      db += s_db[k][threadIdx.x];
    }
    partial[int64_t(s) * C + c] = dw;
    partial[(int64_t(splits) + s) * C + c] = db;
  }
}

template <typename T>
__global__ void layernorm_param_finalize_kernel(const Acc<T>* partial, T* dweight, T* dbias, int64_t C, int splits) {
  using A = Acc<T>;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    A dw = 0, db = 0;
    for (int s = 0; s < splits; ++s) {
      dw += partial[int64_t(s) * C + c];
      db += partial[(int64_t(splits) + s) * C + c];
    }
    if (dweight) dweight[c] = from_acc<T>(dw);
    if (dbias) dbias[c] = from_acc<T>(db);
  }
}

// The fast backward for rows of at most 32 * VEC * CHUNKS elements, C a
// multiple of VEC (16 bytes of T), T f32/bf16/f16: a warp per row holds its
// row in registers (one read of dy and x), writes dx 16 bytes a lane, and
// keeps its columns' dweight/dbias sums in registers across the rows it
// takes (rows warp, warp + all warps, ...). The block's warps then add their
// sums in warp order into shared memory, and the block writes one partial
// per column; layernorm_param_finalize_columns adds the blocks' partials in
// a fixed order: the same bits on every run, no atomics.
template <typename T>
struct Vec16 {
  static constexpr int n = 16 / sizeof(T);
  T v[n];
};

template <typename T, typename G, int CHUNKS>
__global__ void __launch_bounds__(256)
    layernorm_backward_rows_kernel(const G* dy, const T* x, const T* w, const float* mean, const float* rstd, T* dx,
                                   float* partial, int64_t rows, int64_t C) {
  constexpr int VEC = Vec16<T>::n;
  __shared__ float s_dw[32 * VEC * CHUNKS], s_db[32 * VEC * CHUNKS];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float dw_sum[CHUNKS][VEC], db_sum[CHUNKS][VEC];
#pragma unroll
  for (int k = 0; k < CHUNKS; ++k)
#pragma unroll
    for (int e = 0; e < VEC; ++e) dw_sum[k][e] = db_sum[k][e] = 0.0f;
  const int64_t warps = int64_t(gridDim.x) * 8;
  for (int64_t row = blockIdx.x * int64_t(8) + warp; row < rows; row += warps) {
    const int64_t base = row * C;
    const float mu = mean[row], r = rstd[row];
    float xhat[CHUNKS][VEC], dyv[CHUNKS][VEC];  // w * dy is formed again below: fewer registers
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int k = 0; k < CHUNKS; ++k) {
      const int64_t c = (int64_t(k) * 32 + lane) * VEC;
      if (c < C) {
        const VecOf<G, VEC> d = *reinterpret_cast<const VecOf<G, VEC>*>(dy + base + c);
        const Vec16<T> xv = *reinterpret_cast<const Vec16<T>*>(x + base + c);
        Vec16<T> wv;
        if (w) wv = *reinterpret_cast<const Vec16<T>*>(w + c);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          dyv[k][e] = to_acc(d.v[e]);
          xhat[k][e] = (to_acc(xv.v[e]) - mu) * r;
          const float g = dyv[k][e] * (w ? to_acc(wv.v[e]) : 1.0f);
          sum_g += g;
          sum_gx += g * xhat[k][e];
        }
      }
    }
    const float mean_g = warp_sum(sum_g) / float(C), mean_gx = warp_sum(sum_gx) / float(C);
#pragma unroll
    for (int k = 0; k < CHUNKS; ++k) {
      const int64_t c = (int64_t(k) * 32 + lane) * VEC;
      if (c < C) {
        Vec16<T> out, wv;
        if (w) wv = *reinterpret_cast<const Vec16<T>*>(w + c);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float g = dyv[k][e] * (w ? to_acc(wv.v[e]) : 1.0f);
          out.v[e] = from_acc<T>(r * (g - mean_g - xhat[k][e] * mean_gx));
          dw_sum[k][e] += dyv[k][e] * xhat[k][e];
          db_sum[k][e] += dyv[k][e];
        }
        if (dx) *reinterpret_cast<Vec16<T>*>(dx + base + c) = out;
      }
    }
  }
  if (!partial) return;
  // Warp 0 writes its sums, then warps 1..7 add theirs in turn.
  for (int turn = 0; turn < 8; ++turn) {
    if (warp == turn) {
#pragma unroll
      for (int k = 0; k < CHUNKS; ++k) {
        const int64_t c = (int64_t(k) * 32 + lane) * VEC;
        if (c < C)
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            s_dw[c + e] = turn == 0 ? dw_sum[k][e] : s_dw[c + e] + dw_sum[k][e];
            s_db[c + e] = turn == 0 ? db_sum[k][e] : s_db[c + e] + db_sum[k][e];
          }
      }
    }
    __syncthreads();
  }
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    partial[int64_t(blockIdx.x) * C + c] = s_dw[c];
    partial[(int64_t(gridDim.x) + blockIdx.x) * C + c] = s_db[c];
  }
}

// blockDim (32, 8): adds layernorm_backward_rows_kernel's per-block partials
// ([2][blocks][C], one per block of the GPU, a few hundred) for 32 columns,
// each of 8 threads over every 8th block, then the 8 in order: the sums of a
// column are spread over 8 threads rather than a chain of a few hundred
// dependent loads in one.
template <typename T>
__global__ void layernorm_param_finalize_columns_kernel(const float* partial, T* dweight, T* dbias, int64_t C,
                                                        int blocks) {
  __shared__ float s_dw[8][33], s_db[8][33];
  const int64_t c = blockIdx.x * int64_t(32) + threadIdx.x;
  float dw = 0.0f, db = 0.0f;
  if (c < C) {
#pragma unroll 4
    for (int b = threadIdx.y; b < blocks; b += 8) {
      dw += partial[int64_t(b) * C + c];
      db += partial[(int64_t(blocks) + b) * C + c];
    }
  }
  s_dw[threadIdx.y][threadIdx.x] = dw;
  s_db[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int k = 1; k < 8; ++k) {
    dw += s_dw[k][threadIdx.x];
    db += s_db[k][threadIdx.x];
  }
  if (dweight) dweight[c] = from_acc<T>(dw);
  if (dbias) dbias[c] = from_acc<T>(db);
}

DType stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

void check_param(const Tensor& p, const Tensor& x, int64_t C, const char* op, const char* what) {
  if (!p.defined()) return;
  check_cuda(p, op, what);
  check_same_device(p, x, op);
  check_contiguous(p, op, what);
  check_shape(p, {C}, op, what);
  check_dtype(p, x.dtype(), op, what);
}

// The dtype of y or dy beside rows x: x's own, or bf16/f16 beside f32 rows.
void check_side_dtype(const Tensor& t, const Tensor& x, const char* op, const char* what) {
  const bool lowered = x.dtype() == DType::f32 && (t.dtype() == DType::bf16 || t.dtype() == DType::f16);
  KILN_CHECK(t.dtype() == x.dtype() || lowered, op, ": ", what, " must be ", dtype_name(x.dtype()),
             x.dtype() == DType::f32 ? " (or bf16/f16)" : "", ", got ", dtype_name(t.dtype()));
}

// Runs f.template operator()<G>() with G the element type of `side`: T
// itself, or bf16/f16 beside f32 rows (check_side_dtype allowed no other).
template <typename T, typename F>
void dispatch_side(DType side, DType rows, F&& f) {
  if (side == rows) return f.template operator()<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (side == DType::bf16) return f.template operator()<bf16>();
    return f.template operator()<f16>();
  }
}

// x [N, C] and y like it (y may be lowered where `lowered_y`), contiguous on
// the GPU: the rows a norm's forward reads and writes.
void check_norm_rows(const Tensor& x, const Tensor& y, const char* op, bool lowered_y = false) {
  check_cuda(x, op, "x");
  check_contiguous(x, op, "x");
  KILN_CHECK(x.dim() == 2, op, ": x must be [N, C], got ", shape_str(x.shape()));
  check_cuda(y, op, "y");
  check_contiguous(y, op, "y");
  check_shape(y, x.shape(), op, "y");
  if (lowered_y)
    check_side_dtype(y, x, op, "y");
  else
    check_dtype(y, x.dtype(), op, "y");
}

void check_stats(const Tensor& t, const Tensor& x, int64_t N, const char* op, const char* what) {
  check_cuda(t, op, what);
  check_same_device(t, x, op);
  check_contiguous(t, op, what);
  check_shape(t, {N}, op, what);
  check_dtype(t, stats_dtype(x.dtype()), op, what);
}

// Runs layernorm_backward_rows_kernel where it applies (see there); false
// where the general kernels must run.
bool layernorm_backward_by_rows(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const DType t = x.dtype();
  if (t != DType::f32 && t != DType::bf16 && t != DType::f16) return false;
  const int64_t N = x.size(0), C = x.size(1), vec = 16 / int64_t(dtype_size(t));
  const int64_t needed = ceil_div(C, 32 * vec);  // 16-byte pieces a lane: 8 f32 or 4 bf16/f16 at most (registers)
  if (C % vec != 0 || needed > (vec == 4 ? 8 : 4)) return false;
  for (const Tensor* p : std::initializer_list<const Tensor*>{&dy, &x, &weight, &dx})
    if (p->defined() && !aligned_to(*p, 16)) return false;
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  const bool params = dweight.defined() || dbias.defined();
  int blocks = 0;
  Tensor partial;
  dispatch_floating(t, "layernorm_backward", [&]<typename T>() {
    if constexpr (sizeof(T) == 8) {
      return;  // not reached: f64 takes the general kernels
    } else {
      dispatch_side<T>(dy.dtype(), t, [&]<typename G>() {
        auto launch = [&]<int CHUNKS>() {
          // As many blocks as fit on the GPU at once: each warp then takes
          // several rows, and the partials stay few.
          int per_sm = 0;
          KILN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
              &per_sm, layernorm_backward_rows_kernel<T, G, CHUNKS>, 256, 0));
          blocks = int(std::min<int64_t>(ceil_div(N, 8), int64_t(device_state(dev).sm_count) * std::max(per_sm, 1)));
          if (params) partial = empty_workspace({2 * int64_t(blocks) * C}, DType::f32, x.device());
          layernorm_backward_rows_kernel<T, G, CHUNKS><<<unsigned(blocks), 256, 0, stream>>>(
              ptr<const G>(dy), ptr<const T>(x), weight.defined() ? ptr<const T>(weight) : nullptr,
              ptr<const float>(mean), ptr<const float>(rstd), dx.defined() ? ptr<T>(dx) : nullptr,
              params ? ptr<float>(partial) : nullptr, N, C);
        };
        if (needed <= 1)
          launch.template operator()<1>();
        else if (needed <= 2)
          launch.template operator()<2>();
        else if (needed <= 3)
          launch.template operator()<3>();
        else if (needed <= 4 || sizeof(T) == 2)
          launch.template operator()<4>();
        else if constexpr (sizeof(T) == 4) {
          if (needed <= 6)
            launch.template operator()<6>();
          else
            launch.template operator()<8>();
        }
        KILN_CUDA_CHECK_LAUNCH();
        if (params) {
          layernorm_param_finalize_columns_kernel<T><<<unsigned(ceil_div(C, 32)), dim3(32, 8), 0, stream>>>(
              ptr<const float>(partial), dweight.defined() ? ptr<T>(dweight) : nullptr,
              dbias.defined() ? ptr<T>(dbias) : nullptr, C, blocks);
          KILN_CUDA_CHECK_LAUNCH();
        }
      });
    }
  });
  return true;
}

}  // namespace

void CudaBackend::layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                            Tensor& mean, Tensor& rstd) {
  const char* op = "layernorm";
  check_norm_rows(x, y, op, /*lowered_y=*/true);
  const int64_t N = x.size(0), C = x.size(1);
  check_param(weight, x, C, op, "weight");
  check_param(bias, x, C, op, "bias");
  check_stats(mean, x, N, op, "mean");
  check_stats(rstd, x, N, op, "rstd");
  if (N == 0) return;
  KILN_CHECK(C > 0, "layernorm: rows are empty (C = 0)");
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    dispatch_side<T>(y.dtype(), x.dtype(), [&]<typename O>() {
      using A = Acc<T>;
      const T* w = weight.defined() ? ptr<const T>(weight) : nullptr;
      const T* b = bias.defined() ? ptr<const T>(bias) : nullptr;
      if (C <= 1024)
        layernorm_kernel<T, O, 32><<<unsigned(ceil_div(N, 8)), 256, 0, stream>>>(ptr<const T>(x), w, b, ptr<O>(y),
                                                                                 ptr<A>(mean), ptr<A>(rstd), N, C, eps);
      else
        layernorm_kernel<T, O, 256>
            <<<unsigned(N), 256, 0, stream>>>(ptr<const T>(x), w, b, ptr<O>(y), ptr<A>(mean), ptr<A>(rstd), N, C, eps);
    });
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, bool plus_one, Tensor& y, Tensor& rstd) {
  const char* op = "rms_norm";
  check_norm_rows(x, y, op);
  const int64_t N = x.size(0), C = x.size(1);
  KILN_CHECK(weight.defined(), "rms_norm: a weight is needed");
  check_param(weight, x, C, op, "weight");
  check_stats(rstd, x, N, op, "rstd");
  if (N == 0) return;
  KILN_CHECK(C > 0, "rms_norm: rows are empty (C = 0)");
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    using A = Acc<T>;
    if (C <= 1024)
      rms_norm_kernel<T, 32><<<unsigned(ceil_div(N, 8)), 256, 0, stream>>>(
          ptr<const T>(x), ptr<const T>(weight), ptr<T>(y), ptr<A>(rstd), N, C, eps, plus_one);
    else
      rms_norm_kernel<T, 256><<<unsigned(N), 256, 0, stream>>>(ptr<const T>(x), ptr<const T>(weight), ptr<T>(y),
                                                               ptr<A>(rstd), N, C, eps, plus_one);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void CudaBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const char* op = "layernorm_backward";
  check_cuda(x, op, "x");
  check_contiguous(x, op, "x");
  KILN_CHECK(x.dim() == 2, "layernorm_backward: x must be [N, C], got ", shape_str(x.shape()));
  const int64_t N = x.size(0), C = x.size(1);
  check_cuda(dy, op, "dy");
  check_contiguous(dy, op, "dy");
  check_shape(dy, x.shape(), op, "dy");
  check_side_dtype(dy, x, op, "dy");
  check_param(weight, x, C, op, "weight");
  check_stats(mean, x, N, op, "mean");
  check_stats(rstd, x, N, op, "rstd");
  if (dx.defined()) {
    check_cuda(dx, op, "dx");
    check_contiguous(dx, op, "dx");
    check_shape(dx, x.shape(), op, "dx");
    check_dtype(dx, x.dtype(), op, "dx");
  }
  check_param(dweight, x, C, op, "dweight");
  check_param(dbias, x, C, op, "dbias");
  if (C == 0) return;
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  if (N > 0 && layernorm_backward_by_rows(dy, x, weight, mean, rstd, dx, dweight, dbias)) return;
  dispatch_floating(x.dtype(), op, [&]<typename T>() {
    dispatch_side<T>(dy.dtype(), x.dtype(), [&]<typename G>() {
      using A = Acc<T>;
      const T* w = weight.defined() ? ptr<const T>(weight) : nullptr;
      // The column sums first, then dx: dx may be written over dy.
      if (dweight.defined() || dbias.defined()) {
        const int64_t col_blocks = ceil_div(C, 32);
        const int64_t want = ceil_div(int64_t(device_state(dev).sm_count) * 4, col_blocks);
        const int64_t splits0 = std::clamp<int64_t>(std::min(want, ceil_div(std::max<int64_t>(N, 1), 64)), 1, 1024);
        const int64_t chunk = ceil_div(std::max<int64_t>(N, 1), splits0);
        const int splits = int(ceil_div(std::max<int64_t>(N, 1), chunk));
        Tensor partial = empty_workspace({2 * splits * C}, stats_dtype(x.dtype()), x.device());
        layernorm_param_partial_kernel<T, G><<<dim3(unsigned(col_blocks), unsigned(splits)), dim3(32, 8), 0, stream>>>(
            ptr<const G>(dy), ptr<const T>(x), ptr<const A>(mean), ptr<const A>(rstd), ptr<A>(partial), N, C, chunk,
            splits);
        KILN_CUDA_CHECK_LAUNCH();
        layernorm_param_finalize_kernel<T><<<grid_for(C, 256, dev), 256, 0, stream>>>(
            ptr<const A>(partial), dweight.defined() ? ptr<T>(dweight) : nullptr,
            dbias.defined() ? ptr<T>(dbias) : nullptr, C, splits);
        KILN_CUDA_CHECK_LAUNCH();
      }
      if (dx.defined() && N > 0) {
        if (C <= 1024)
          layernorm_dx_kernel<T, G, 32><<<unsigned(ceil_div(N, 8)), 256, 0, stream>>>(
              ptr<const G>(dy), ptr<const T>(x), w, ptr<const A>(mean), ptr<const A>(rstd), ptr<T>(dx), N, C);
        else
          layernorm_dx_kernel<T, G, 256><<<unsigned(N), 256, 0, stream>>>(
              ptr<const G>(dy), ptr<const T>(x), w, ptr<const A>(mean), ptr<const A>(rstd), ptr<T>(dx), N, C);
        KILN_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

}  // namespace kiln::cuda
