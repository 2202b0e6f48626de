// Fused (flash-style) scaled dot-product attention, forward.
//
//  out[t] = sum_j softmax_j(scale * q[t] . k[j]) v[j]   (j <= t when causal)
//  lse[t] = log sum_j exp(scale * q[t] . k[j])           (kept for the backward)
//
// q, k, v, out: [B, H, T, D] contiguous, D <= 128; lse [B, H, T] f32 (f64 for
// f64). Grid (ceil(T/16), B*H), 128 threads. Each warp keeps 4 query rows'
// running max, sum and output in registers and streams 32-key tiles of K and
// V through shared memory, rescaling with the online softmax, so the T x T
// score matrix never exists. Causal blocks stop at their last query's key.
// See attention_common.cuh for the layout. bf16/f16 with head dim 64 or 128
// run on tensor cores instead (attention_tc.cu).
#include "kiln/cuda/attention_common.cuh"
#include "kiln/cuda/attention_cudnn.h"
#include "kiln/cuda/attention_tc.h"
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"

namespace kiln::cuda {
namespace {

using namespace attn;

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    attention_forward_kernel(const T* q, const T* k, const T* v, T* out, Acc<T>* lse, int64_t len, int D, float scale,
                             bool causal) {
  using A = Acc<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* sQ = reinterpret_cast<A*>(smem_raw);  // [16][D], pre-scaled
  A* sK = sQ + kBlockRows * D;             // [32][D+1]
  A* sV = sK + kTile * (D + 1);            // [32][D+1]
  const int64_t bh = blockIdx.y, q0 = blockIdx.x * int64_t(kBlockRows);
  const int64_t base = bh * len * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_tile(sQ, D, q + base, q0, kBlockRows, len, D, A(scale));

  A m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = neg_infinity<A>();
    l[r] = 0;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[r][i] = 0;
  }
  const int64_t q_last = min(q0 + kBlockRows, len) - 1;
  const int64_t k_end = causal ? q_last + 1 : len;
  const A* q_rows = sQ + warp * kRowsPerWarp * D;

  for (int64_t k0 = 0; k0 < k_end; k0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and sQ is loaded)
    load_tile(sK, D + 1, k + base, k0, kTile, len, D, A(1));
    load_tile(sV, D + 1, v + base, k0, kTile, len, D, A(1));
    __syncthreads();
    const int64_t key = k0 + lane;
    A s[kRowsPerWarp] = {};
    const A* k_row = sK + lane * (D + 1);
    for (int d = 0; d < D; ++d) {
      const A kd = k_row[d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) s[r] += q_rows[r * D + d] * kd;
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t qi = q0 + warp * kRowsPerWarp + r;
      const bool valid = key < len && qi < len && (!causal || key <= qi);
      const A sr = valid ? s[r] : neg_infinity<A>();
      const A m_new = max_nan(m[r], warp_max(sr));
      if (m_new == neg_infinity<A>()) continue;  // warp-uniform: no valid key yet for this row
      const A corr = exp_acc(m[r] - m_new);      // 0 while m[r] is still -inf
      const A p = valid ? exp_acc(sr - m_new) : A(0);
      l[r] = l[r] * corr + warp_sum(p);
      m[r] = m_new;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) acc[r][i] *= corr;
      for (int j = 0; j < kTile; ++j) {
        const A pj = __shfl_sync(0xffffffffu, p, j);
        const A* v_row = sV + j * (D + 1);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < D) acc[r][i] += pj * v_row[d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t qi = q0 + warp * kRowsPerWarp + r;
    if (qi >= len) continue;
    const A inv = A(1) / l[r];
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) out[base + qi * D + d] = from_acc<T>(acc[r][i] * inv);
    }
    if (lane == 0) lse[bh * len + qi] = m[r] + log_acc(l[r]);
  }
}

}  // namespace

// Shape checks shared with the backward (attention_backward.cu). Strides are
// not checked here: the tensor-core path reads views in place, the CUDA-core
// kernels get contiguous copies.
void check_like_q(const Tensor& t, const Tensor& q, const char* op, const char* what) {
  check_cuda(t, op, what);
  check_same_device(t, q, op);
  check_shape(t, q.shape(), op, what);
  check_dtype(t, q.dtype(), op, what);
}

void check_attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse, const char* op) {
  KILN_CHECK(q.dim() == 4, op, ": q must be [B, H, T, D], got ", shape_str(q.shape()));
  check_like_q(q, q, op, "q");
  check_like_q(k, q, op, "k");
  check_like_q(v, q, op, "v");
  KILN_CHECK(q.size(3) <= kMaxD, op, ": head dim ", q.size(3), " is larger than the ", kMaxD,
             " the CUDA kernel supports");
  KILN_CHECK(q.size(0) * q.size(1) <= 65535, op, ": B*H = ", q.size(0) * q.size(1), " exceeds 65535");
  check_cuda(lse, op, "lse");
  check_same_device(lse, q, op);
  check_contiguous(lse, op, "lse");
  check_shape(lse, {q.size(0), q.size(1), q.size(2)}, op, "lse");
  check_dtype(lse, q.dtype() == DType::f64 ? DType::f64 : DType::f32, op, "lse");
}

// Opts the kernel into `bytes` of dynamic shared memory when above the default 48 KiB.
void set_smem(const void* kernel, size_t bytes, int dev, const char* op) {
  KILN_CHECK(bytes <= size_t(device_state(dev).max_smem_optin), op, ": needs ", bytes,
             " bytes of shared memory per block, the device allows ", device_state(dev).max_smem_optin);
  if (bytes > 48 * 1024)
    KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                            bool causal) {
  const char* op = "attention";
  check_attention_args(q, k, v, lse, op);
  check_like_q(out, q, op, "out");
  const int64_t BH = q.size(0) * q.size(1), len = q.size(2);
  const int D = int(q.size(3));
  if (BH == 0 || len == 0) return;
  KILN_CHECK(D > 0, "attention: head dim is 0");
  const int dev = q.device().index;
  DeviceGuard guard(dev);
  if (tensor_core_attention_applies(q, {&q, &k, &v, &out})) {
    if (cudnn_attention(q, k, v, out, lse, scale, causal)) return;
    return tensor_core_attention(q, k, v, out, lse, scale, causal);
  }
  // The CUDA-core kernels read contiguous heads; other views are copied in,
  // and the output out.
  if (!all_contiguous({&q, &k, &v, &out})) {
    Tensor o = empty_workspace(out.shape(), out.dtype(), out.device());
    attention(contiguous_or_copy(q), contiguous_or_copy(k), contiguous_or_copy(v), o, lse, scale, causal);
    return copy(o, out);
  }
  dispatch_floating(q.dtype(), op, [&]<typename T>() {
    using A = Acc<T>;
    const size_t smem = size_t(kBlockRows * D + 2 * kTile * (D + 1)) * sizeof(A);
    set_smem(reinterpret_cast<const void*>(&attention_forward_kernel<T>), smem, dev, op);
    dim3 grid(unsigned(ceil_div(len, kBlockRows)), unsigned(BH));
    attention_forward_kernel<T><<<grid, kWarps * 32, smem, stream_for(dev)>>>(
        ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<T>(out), ptr<A>(lse), len, D, scale, causal);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
