// Fused attention backward, recomputing probabilities from the saved lse.
//
//  P[t,j]  = exp(scale * q[t].k[j] - lse[t])   (0 where masked)
//  dP[t,j] = dout[t] . v[j],   Dd[t] = dout[t] . out[t] = sum_j P[t,j] dP[t,j]
//  dS[t,j] = P[t,j] (dP[t,j] - Dd[t])
//  dq[t] = scale * sum_j dS[t,j] k[j]
//  dk[j] = scale * sum_t dS[t,j] q[t],   dv[j] = sum_t P[t,j] dout[t]
//
// Three kernels, none with atomics, so the result is deterministic:
//  attention_dd_kernel    Dd, a warp per row.
//  attention_dq_kernel    like the forward: a block owns 16 query rows and
//                         streams 32-key tiles of K and V.
//  attention_dkdv_kernel  the transpose: a block owns 16 key rows and streams
//                         32-query tiles of Q, dout, lse and Dd.
// P is computed twice (once per pass): the price of not needing atomics.
// Layout and limits as in attention.cu (D <= 128, [B, H, T, D] contiguous).
// bf16/f16 with head dim 64 or 128 run attention_tc.cu instead (Dd included).
#include "kiln/cuda/attention_common.cuh"
#include "kiln/cuda/attention_cudnn.h"
#include "kiln/cuda/attention_tc.h"
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"

namespace kiln::cuda {
namespace {

using namespace attn;

template <typename T>
__global__ void attention_dd_kernel(const T* dout, const T* out, Acc<T>* dd, int64_t rows, int D) {
  using A = Acc<T>;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  A s = 0;
  for (int d = lane; d < D; d += 32) s += to_acc(dout[row * D + d]) * to_acc(out[row * D + d]);
  s = warp_sum(s);
  if (lane == 0) dd[row] = s;
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dq_kernel(const T* q, const T* k, const T* v, const T* dout, const Acc<T>* lse, const Acc<T>* dd, T* dq,
                        int64_t len, int D, float scale, bool causal) {
  using A = Acc<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* sQ = reinterpret_cast<A*>(smem_raw);  // [16][D]
  A* sO = sQ + kBlockRows * D;             // [16][D]   dout rows
  A* sK = sO + kBlockRows * D;             // [32][D+1]
  A* sV = sK + kTile * (D + 1);            // [32][D+1]
  const int64_t bh = blockIdx.y, q0 = blockIdx.x * int64_t(kBlockRows), base = bh * len * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_tile(sQ, D, q + base, q0, kBlockRows, len, D, A(1));
  load_tile(sO, D, dout + base, q0, kBlockRows, len, D, A(1));
  A row_lse[kRowsPerWarp], row_dd[kRowsPerWarp], acc[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t qi = q0 + warp * kRowsPerWarp + r;
    row_lse[r] = qi < len ? lse[bh * len + qi] : A(0);
    row_dd[r] = qi < len ? dd[bh * len + qi] : A(0);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[r][i] = 0;
  }
  const int64_t q_last = min(q0 + kBlockRows, len) - 1;
  const int64_t k_end = causal ? q_last + 1 : len;
  const A* q_rows = sQ + warp * kRowsPerWarp * D;
  const A* o_rows = sO + warp * kRowsPerWarp * D;

  for (int64_t k0 = 0; k0 < k_end; k0 += kTile) {
    __syncthreads();
    load_tile(sK, D + 1, k + base, k0, kTile, len, D, A(1));
    load_tile(sV, D + 1, v + base, k0, kTile, len, D, A(1));
    __syncthreads();
    const int64_t key = k0 + lane;
    A s[kRowsPerWarp] = {}, dp[kRowsPerWarp] = {};
    const A* k_row = sK + lane * (D + 1);
    const A* v_row = sV + lane * (D + 1);
    for (int d = 0; d < D; ++d) {
      const A kd = k_row[d], vd = v_row[d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        s[r] += q_rows[r * D + d] * kd;
        dp[r] += o_rows[r * D + d] * vd;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t qi = q0 + warp * kRowsPerWarp + r;
      const bool valid = key < len && qi < len && (!causal || key <= qi);
      const A p = valid ? exp_acc(A(scale) * s[r] - row_lse[r]) : A(0);
      const A ds = p * (dp[r] - row_dd[r]);
      for (int j = 0; j < kTile; ++j) {
        const A dsj = __shfl_sync(0xffffffffu, ds, j);
        const A* kj = sK + j * (D + 1);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < D) acc[r][i] += dsj * kj[d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t qi = q0 + warp * kRowsPerWarp + r;
    if (qi >= len) continue;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) dq[base + qi * D + d] = from_acc<T>(A(scale) * acc[r][i]);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dkdv_kernel(const T* q, const T* k, const T* v, const T* dout, const Acc<T>* lse, const Acc<T>* dd, T* dk,
                          T* dv, int64_t len, int D, float scale, bool causal) {
  using A = Acc<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* sK = reinterpret_cast<A*>(smem_raw);  // [16][D]   key rows owned by the block
  A* sV = sK + kBlockRows * D;             // [16][D]
  A* sQ = sV + kBlockRows * D;             // [32][D+1] streamed query rows
  A* sO = sQ + kTile * (D + 1);            // [32][D+1] streamed dout rows
  A* sL = sO + kTile * (D + 1);            // [32] lse
  A* sD = sL + kTile;                      // [32] Dd
  const int64_t bh = blockIdx.y, k0 = blockIdx.x * int64_t(kBlockRows), base = bh * len * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_tile(sK, D, k + base, k0, kBlockRows, len, D, A(1));
  load_tile(sV, D, v + base, k0, kBlockRows, len, D, A(1));
  A acc_k[kRowsPerWarp][kDimsPerLane], acc_v[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc_k[r][i] = acc_v[r][i] = 0;
  const A* k_rows = sK + warp * kRowsPerWarp * D;
  const A* v_rows = sV + warp * kRowsPerWarp * D;
  // Causal: queries before the block's first key see none of its keys.
  const int64_t q_start = causal ? k0 / kTile * kTile : 0;

  for (int64_t t0 = q_start; t0 < len; t0 += kTile) {
    __syncthreads();
    load_tile(sQ, D + 1, q + base, t0, kTile, len, D, A(1));
    load_tile(sO, D + 1, dout + base, t0, kTile, len, D, A(1));
    if (threadIdx.x < kTile) {
      const int64_t t = t0 + threadIdx.x;
      sL[threadIdx.x] = t < len ? lse[bh * len + t] : A(0);
      sD[threadIdx.x] = t < len ? dd[bh * len + t] : A(0);
    }
    __syncthreads();
    const int64_t query = t0 + lane;
    A s[kRowsPerWarp] = {}, dp[kRowsPerWarp] = {};
    const A* q_row = sQ + lane * (D + 1);
    const A* o_row = sO + lane * (D + 1);
    for (int d = 0; d < D; ++d) {
      const A qd = q_row[d], od = o_row[d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        s[r] += k_rows[r * D + d] * qd;
        dp[r] += v_rows[r * D + d] * od;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t kj = k0 + warp * kRowsPerWarp + r;
      const bool valid = query < len && kj < len && (!causal || kj <= query);
      const A p = valid ? exp_acc(A(scale) * s[r] - sL[lane]) : A(0);
      const A ds = p * (dp[r] - sD[lane]);
      for (int j = 0; j < kTile; ++j) {
        const A pj = __shfl_sync(0xffffffffu, p, j);
        const A dsj = __shfl_sync(0xffffffffu, ds, j);
        const A* oj = sO + j * (D + 1);
        const A* qj = sQ + j * (D + 1);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < D) {
            acc_v[r][i] += pj * oj[d];
            acc_k[r][i] += dsj * qj[d];
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t kj = k0 + warp * kRowsPerWarp + r;
    if (kj >= len) continue;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) {
        dk[base + kj * D + d] = from_acc<T>(A(scale) * acc_k[r][i]);
        dv[base + kj * D + d] = from_acc<T>(acc_v[r][i]);
      }
    }
  }
}

}  // namespace

void CudaBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv,
                                     float scale, bool causal) {
  const char* op = "attention_backward";
  check_attention_args(q, k, v, lse, op);
  check_like_q(dout, q, op, "dout");
  check_like_q(out, q, op, "out");
  check_like_q(dq, q, op, "dq");
  check_like_q(dk, q, op, "dk");
  check_like_q(dv, q, op, "dv");
  const int64_t BH = q.size(0) * q.size(1), len = q.size(2);
  const int D = int(q.size(3));
  if (BH == 0 || len == 0 || D == 0) return;
  const int dev = q.device().index;
  DeviceGuard guard(dev);
  if (tensor_core_attention_applies(q, {&dout, &q, &k, &v, &out, &dq, &dk, &dv})) {
    if (cudnn_attention_backward(dout, q, k, v, out, lse, dq, dk, dv, scale, causal)) return;
    Tensor dd = empty_workspace({BH * len}, DType::f32, q.device());
    return tensor_core_attention_backward(dout, q, k, v, out, lse, dd, dq, dk, dv, scale, causal);
  }
  // The CUDA-core kernels read and write contiguous heads; other views are
  // copied in and out.
  if (!all_contiguous({&dout, &q, &k, &v, &out, &dq, &dk, &dv})) {
    auto in = [](const Tensor& t) { return contiguous_or_copy(t); };
    auto scratch = [](const Tensor& t) { return empty_workspace(t.shape(), t.dtype(), t.device()); };
    Tensor dqc = scratch(dq), dkc = scratch(dk), dvc = scratch(dv);
    attention_backward(in(dout), in(q), in(k), in(v), in(out), lse, dqc, dkc, dvc, scale, causal);
    copy(dqc, dq);
    copy(dkc, dk);
    return copy(dvc, dv);
  }
  cudaStream_t stream = stream_for(dev);
  dispatch_floating(q.dtype(), op, [&]<typename T>() {
    using A = Acc<T>;
    Tensor dd = empty_workspace({BH * len}, lse.dtype(), q.device());
    attention_dd_kernel<T><<<unsigned(ceil_div(BH * len, 8)), 256, 0, stream>>>(ptr<const T>(dout), ptr<const T>(out),
                                                                                ptr<A>(dd), BH * len, D);
    KILN_CUDA_CHECK_LAUNCH();
    const dim3 grid(unsigned(ceil_div(len, kBlockRows)), unsigned(BH));
    const size_t smem_dq = size_t(2 * kBlockRows * D + 2 * kTile * (D + 1)) * sizeof(A);
    set_smem(reinterpret_cast<const void*>(&attention_dq_kernel<T>), smem_dq, dev, op);
    attention_dq_kernel<T><<<grid, kWarps * 32, smem_dq, stream>>>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v),
                                                                   ptr<const T>(dout), ptr<const A>(lse),
                                                                   ptr<const A>(dd), ptr<T>(dq), len, D, scale, causal);
    KILN_CUDA_CHECK_LAUNCH();
    const size_t smem_kv = size_t(2 * kBlockRows * D + 2 * kTile * (D + 1) + 2 * kTile) * sizeof(A);
    set_smem(reinterpret_cast<const void*>(&attention_dkdv_kernel<T>), smem_kv, dev, op);
    attention_dkdv_kernel<T><<<grid, kWarps * 32, smem_kv, stream>>>(
        ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const T>(dout), ptr<const A>(lse), ptr<const A>(dd),
        ptr<T>(dk), ptr<T>(dv), len, D, scale, causal);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda
