// Tensor-core attention for bf16 and f16 with head dims 64 and 128 (GPT-2's
// and Llama's shapes): attention.cu's algorithm (an online softmax, so the
// T x T matrix never exists; a backward that recomputes P from the saved lse
// in a dQ pass and a dK/dV pass, no atomics), with every product (Q K^T, P V,
// dO V^T, dS K, P^T dO, dS^T Q) run as WMMA 16x16x16 tiles on tensor cores
// with f32 accumulation.
//
// A block of 4 warps owns 64 rows (queries, or keys in the dK/dV pass), 16
// per warp, and streams 64-row tiles of the other side through shared
// memory. WMMA leaves the accumulator's element layout unspecified, so the
// row-wise steps (masking, softmax, rescaling the output) go through shared
// memory: each warp stores its 16 x 64 score tile, lanes 2r and 2r+1 work on
// row r (32 columns each), and the warp loads the result back as an operand.
// P and dS are rounded to the input type for their products, as
// FlashAttention-2 does; sums and statistics stay f32. Shared tiles carry 16
// bytes of padding per row (WMMA needs 32-byte aligned tiles and a pitch that
// is a multiple of 8 elements; the padding also spreads rows over banks).
#include <mma.h>

#include "kiln/cuda/attention_common.cuh"
#include "kiln/cuda/attention_tc.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

using namespace nvcuda;

constexpr int kWarps = 4;
constexpr int kWarpRows = 16;                 // rows a warp owns
constexpr int kBlockRows = kWarps * kWarpRows;  // 64 rows a block owns
constexpr int kTileRows = 64;                 // rows streamed per step

template <int D>
struct Pitch {
  static constexpr int tile = D + 8;           // T tiles [64][D]
  static constexpr int score = kTileRows + 4;  // f32 score tiles [16][64]
  static constexpr int prob = kTileRows + 8;   // T probability tiles [16][64]
  static constexpr int acc = D + 4;            // f32 output tiles [16][D]
};

template <typename T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Rows [row0, row0 + 64) of a contiguous [len, D] matrix into a shared tile,
// 16 bytes at a time; rows past len are zero.
template <typename T, int D>
__device__ __forceinline__ void load_rows(T* dst, const T* src, int64_t row0, int64_t len) {
  constexpr int kVec = 16 / sizeof(T), kPerRow = D / kVec;
  for (int e = threadIdx.x; e < kTileRows * kPerRow; e += blockDim.x) {
    const int r = e / kPerRow, c = (e % kPerRow) * kVec;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (row0 + r < len) val = *reinterpret_cast<const uint4*>(src + (row0 + r) * D + c);
    *reinterpret_cast<uint4*>(dst + r * Pitch<D>::tile + c) = val;
  }
}

// out[16 x 64] (f32, pitch Pitch::score) = A[16 x D] B^T, where A's rows and
// B's rows (64 of them) are rows of shared T tiles: Q K^T, dO V^T, K Q^T.
template <typename T, int D>
__device__ __forceinline__ void rows_times_rows_t(float* out, const T* a, const T* b) {
#pragma unroll
  for (int j = 0; j < kTileRows / 16; ++j) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.f);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      FragA<T> fa;
      FragBCol<T> fb;  // B^T, column-major, is B's rows as stored
      wmma::load_matrix_sync(fa, a + kk * 16, Pitch<D>::tile);
      wmma::load_matrix_sync(fb, b + j * 16 * Pitch<D>::tile + kk * 16, Pitch<D>::tile);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + j * 16, acc, Pitch<D>::score, wmma::mem_row_major);
  }
}

// acc[n] += P[16 x 64] B[64 x D]: P a probability tile, B a shared T tile.
template <typename T, int D>
__device__ __forceinline__ void accumulate_p_times_tile(FragAcc (&acc)[D / 16], const T* p, const T* b) {
#pragma unroll
  for (int kk = 0; kk < kTileRows / 16; ++kk) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, p + kk * 16, Pitch<D>::prob);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      FragBRow<T> fb;
      wmma::load_matrix_sync(fb, b + kk * 16 * Pitch<D>::tile + n * 16, Pitch<D>::tile);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// A warp's 16 x D accumulators to global rows [row0, row0 + 16) (those below
// len), times `scale`, through the warp's f32 staging tile.
template <typename T, int D>
__device__ __forceinline__ void write_rows(T* dst, FragAcc (&acc)[D / 16], float* stage, int64_t row0, int64_t len,
                                           float scale) {
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(stage + n * 16, acc[n], Pitch<D>::acc, wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  if (row0 + r < len) {
    const float* src = stage + r * Pitch<D>::acc + half * (D / 2);
    T* out = dst + (row0 + r) * D + half * (D / 2);
    for (int d = 0; d < D / 2; ++d) out[d] = from_acc<T>(src[d] * scale);
  }
  __syncwarp();
}

template <typename T, int D>
constexpr size_t forward_smem() {
  using P = Pitch<D>;
  return sizeof(T) * (3 * kTileRows * P::tile + kWarps * kWarpRows * P::prob) +
         sizeof(float) * kWarps * kWarpRows * (P::score + P::acc);
}

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    forward_kernel(const T* q, const T* k, const T* v, T* out, float* lse, int64_t len, float scale, bool causal) {
  using P = Pitch<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kTileRows * P::tile;
  T* sV = sK + kTileRows * P::tile;
  T* sP = sV + kTileRows * P::tile;                                   // [warp][16][prob]
  float* sS = reinterpret_cast<float*>(sP + kWarps * kWarpRows * P::prob);  // [warp][16][score]
  float* sO = sS + kWarps * kWarpRows * P::score;                     // [warp][16][acc]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int64_t bh = blockIdx.y, q0 = int64_t(blockIdx.x) * kBlockRows, base = bh * len * D;
  const int64_t qi = q0 + warp * kWarpRows + r;  // the row lanes 2r, 2r+1 work on
  T* sPw = sP + warp * kWarpRows * P::prob;
  float* sSw = sS + warp * kWarpRows * P::score;
  float* sOw = sO + warp * kWarpRows * P::acc;
  load_rows<T, D>(sQ, q + base, q0, len);
  for (int e = lane; e < kWarpRows * P::acc; e += 32) sOw[e] = 0.f;
  float m = neg_infinity<float>(), l = 0.f;
  const int64_t k_end = causal ? min(q0 + kBlockRows, len) : len;  // causal blocks stop at their last query
  for (int64_t k0 = 0; k0 < k_end; k0 += kTileRows) {
    __syncthreads();  // the previous tiles are consumed
    load_rows<T, D>(sK, k + base, k0, len);
    load_rows<T, D>(sV, v + base, k0, len);
    __syncthreads();
    rows_times_rows_t<T, D>(sSw, sQ + warp * kWarpRows * P::tile, sK);
    __syncwarp();
    // The online softmax over this tile: lane 2r+half owns columns [32 half, 32 half + 32) of row r.
    float* srow = sSw + r * P::score + half * 32;
    float tile_max = neg_infinity<float>();
    for (int c = 0; c < 32; ++c) {
      const int64_t key = k0 + half * 32 + c;
      const float s = key < len && (!causal || key <= qi) ? srow[c] * scale : neg_infinity<float>();
      srow[c] = s;
      tile_max = max_nan(tile_max, s);
    }
    const float m_new = max_nan(m, max_nan(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1)));
    // No valid key yet (m_new = -inf): p = 0 and nothing to rescale. NaN propagates through m.
    const bool none = m_new == neg_infinity<float>();
    const float corr = none ? 1.f : exp_acc(m - m_new);
    float psum = 0.f;
    T* prow = sPw + r * P::prob + half * 32;
    for (int c = 0; c < 32; ++c) {
      const float p = none ? 0.f : exp_acc(srow[c] - m_new);
      prow[c] = from_acc<T>(p);
      psum += p;
    }
    l = l * corr + psum + __shfl_xor_sync(0xffffffffu, psum, 1);
    m = m_new;
    float* orow = sOw + r * P::acc + half * (D / 2);
    for (int d = 0; d < D / 2; ++d) orow[d] *= corr;
    __syncwarp();
    // O += P V, through the accumulators (the output is rescaled in shared memory above).
    FragAcc acc[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; ++n) wmma::load_matrix_sync(acc[n], sOw + n * 16, P::acc, wmma::mem_row_major);
    accumulate_p_times_tile<T, D>(acc, sPw, sV);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(sOw + n * 16, acc[n], P::acc, wmma::mem_row_major);
    __syncwarp();
  }
  if (qi < len) {
    const float inv = 1.f / l;
    const float* orow = sOw + r * P::acc + half * (D / 2);
    T* dst = out + base + qi * D + half * (D / 2);
    for (int d = 0; d < D / 2; ++d) dst[d] = from_acc<T>(orow[d] * inv);
    if (half == 0) lse[bh * len + qi] = m + logf(l);
  }
}

template <typename T, int D>
constexpr size_t dq_smem() {
  using P = Pitch<D>;
  return sizeof(T) * (4 * kTileRows * P::tile + kWarps * kWarpRows * P::prob) +
         sizeof(float) * 2 * kWarps * kWarpRows * P::score;
}

// dq = scale * sum_j dS[., j] k[j] for 64 query rows, streaming key tiles.
template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    dq_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse, const float* dd, T* dq, int64_t len,
              float scale, bool causal) {
  using P = Pitch<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sdO = sQ + kTileRows * P::tile;
  T* sK = sdO + kTileRows * P::tile;
  T* sV = sK + kTileRows * P::tile;
  T* sDS = sV + kTileRows * P::tile;                                    // [warp][16][prob]
  float* sS = reinterpret_cast<float*>(sDS + kWarps * kWarpRows * P::prob);  // [warp][16][score]
  float* sdP = sS + kWarps * kWarpRows * P::score;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int64_t bh = blockIdx.y, q0 = int64_t(blockIdx.x) * kBlockRows, base = bh * len * D;
  const int64_t qi = q0 + warp * kWarpRows + r;
  const float row_lse = qi < len ? lse[bh * len + qi] : 0.f, row_dd = qi < len ? dd[bh * len + qi] : 0.f;
  T* sDSw = sDS + warp * kWarpRows * P::prob;
  float* sSw = sS + warp * kWarpRows * P::score;
  float* sdPw = sdP + warp * kWarpRows * P::score;
  load_rows<T, D>(sQ, q + base, q0, len);
  load_rows<T, D>(sdO, dout + base, q0, len);
  FragAcc acc[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
  const int64_t k_end = causal ? min(q0 + kBlockRows, len) : len;
  for (int64_t k0 = 0; k0 < k_end; k0 += kTileRows) {
    __syncthreads();
    load_rows<T, D>(sK, k + base, k0, len);
    load_rows<T, D>(sV, v + base, k0, len);
    __syncthreads();
    rows_times_rows_t<T, D>(sSw, sQ + warp * kWarpRows * P::tile, sK);
    rows_times_rows_t<T, D>(sdPw, sdO + warp * kWarpRows * P::tile, sV);
    __syncwarp();
    const float* srow = sSw + r * P::score + half * 32;
    const float* dprow = sdPw + r * P::score + half * 32;
    T* dsrow = sDSw + r * P::prob + half * 32;
    for (int c = 0; c < 32; ++c) {
      const int64_t key = k0 + half * 32 + c;
      const bool valid = key < len && qi < len && (!causal || key <= qi);
      const float p = valid ? exp_acc(srow[c] * scale - row_lse) : 0.f;
      dsrow[c] = from_acc<T>(p * (dprow[c] - row_dd));
    }
    __syncwarp();
    accumulate_p_times_tile<T, D>(acc, sDSw, sK);
  }
  __syncthreads();  // every warp is done with sK and sV: stage the output there
  write_rows<T, D>(dq + base, acc, reinterpret_cast<float*>(sK) + warp * kWarpRows * P::acc, q0 + warp * kWarpRows,
                   len, scale);
}

template <typename T, int D>
constexpr size_t dkdv_smem() {
  using P = Pitch<D>;
  return sizeof(T) * (4 * kTileRows * P::tile + 2 * kWarps * kWarpRows * P::prob) +
         sizeof(float) * (2 * kWarps * kWarpRows * P::score + 2 * kTileRows);
}

// dk = scale * sum_t dS[t, .] q[t] and dv = sum_t P[t, .] dout[t] for 64 key
// rows, streaming query tiles (causal: from the block's first key on).
template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    dkdv_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse, const float* dd, T* dk, T* dv,
                int64_t len, float scale, bool causal) {
  using P = Pitch<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + kTileRows * P::tile;
  T* sQ = sV + kTileRows * P::tile;
  T* sdO = sQ + kTileRows * P::tile;
  T* sPT = sdO + kTileRows * P::tile;        // [warp][16][prob]: P^T, keys by queries
  T* sDST = sPT + kWarps * kWarpRows * P::prob;  // dS^T
  float* sST = reinterpret_cast<float*>(sDST + kWarps * kWarpRows * P::prob);  // [warp][16][score]
  float* sdPT = sST + kWarps * kWarpRows * P::score;
  float* sLse = sdPT + kWarps * kWarpRows * P::score;  // [64]
  float* sDd = sLse + kTileRows;                       // [64]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int64_t bh = blockIdx.y, k0 = int64_t(blockIdx.x) * kBlockRows, base = bh * len * D;
  const int64_t kj = k0 + warp * kWarpRows + r;  // the key row lanes 2r, 2r+1 work on
  T* sPTw = sPT + warp * kWarpRows * P::prob;
  T* sDSTw = sDST + warp * kWarpRows * P::prob;
  float* sSTw = sST + warp * kWarpRows * P::score;
  float* sdPTw = sdPT + warp * kWarpRows * P::score;
  load_rows<T, D>(sK, k + base, k0, len);
  load_rows<T, D>(sV, v + base, k0, len);
  FragAcc acc_k[D / 16], acc_v[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(acc_k[n], 0.f), wmma::fill_fragment(acc_v[n], 0.f);
  for (int64_t t0 = causal ? k0 : 0; t0 < len; t0 += kTileRows) {
    __syncthreads();
    load_rows<T, D>(sQ, q + base, t0, len);
    load_rows<T, D>(sdO, dout + base, t0, len);
    for (int i = threadIdx.x; i < kTileRows; i += blockDim.x) {
      const bool in = t0 + i < len;
      sLse[i] = in ? lse[bh * len + t0 + i] : 0.f;
      sDd[i] = in ? dd[bh * len + t0 + i] : 0.f;
    }
    __syncthreads();
    rows_times_rows_t<T, D>(sSTw, sK + warp * kWarpRows * P::tile, sQ);
    rows_times_rows_t<T, D>(sdPTw, sV + warp * kWarpRows * P::tile, sdO);
    __syncwarp();
    const float* srow = sSTw + r * P::score + half * 32;
    const float* dprow = sdPTw + r * P::score + half * 32;
    T* prow = sPTw + r * P::prob + half * 32;
    T* dsrow = sDSTw + r * P::prob + half * 32;
    for (int c = 0; c < 32; ++c) {
      const int i = half * 32 + c;
      const int64_t qt = t0 + i;
      const bool valid = kj < len && qt < len && (!causal || kj <= qt);
      const float p = valid ? exp_acc(srow[c] * scale - sLse[i]) : 0.f;
      prow[c] = from_acc<T>(p);
      dsrow[c] = from_acc<T>(p * (dprow[c] - sDd[i]));
    }
    __syncwarp();
    accumulate_p_times_tile<T, D>(acc_v, sPTw, sdO);
    accumulate_p_times_tile<T, D>(acc_k, sDSTw, sQ);
  }
  __syncthreads();  // every warp is done with sQ and sdO: stage the outputs there
  float* stage = reinterpret_cast<float*>(sQ) + warp * kWarpRows * P::acc;
  write_rows<T, D>(dk + base, acc_k, stage, k0 + warp * kWarpRows, len, scale);
  write_rows<T, D>(dv + base, acc_v, stage, k0 + warp * kWarpRows, len, 1.f);
}

// Runs f<T, D>() for the dtypes and head dims this file covers.
template <typename F>
void dispatch(DType t, int64_t D, F&& f) {
  auto by_dim = [&]<typename T>() {
    if (D == 64)
      f.template operator()<T, 64>();
    else
      f.template operator()<T, 128>();
  };
  if (t == DType::bf16)
    by_dim.template operator()<bf16>();
  else
    by_dim.template operator()<f16>();
}

// The staging of write_rows reuses two streamed tiles: check they hold it.
template <int D>
constexpr bool stage_fits = 2 * kTileRows * Pitch<D>::tile * 2 >= kWarps * kWarpRows * Pitch<D>::acc * 4;
static_assert(stage_fits<64> && stage_fits<128>);

}  // namespace

bool tensor_core_attention_applies(const Tensor& q, std::initializer_list<const Tensor*> tensors) {
  if ((q.dtype() != DType::bf16 && q.dtype() != DType::f16) || (q.size(3) != 64 && q.size(3) != 128)) return false;
  for (const Tensor* t : tensors)
    if (reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0) return false;  // 16-byte row loads
  return true;
}

void tensor_core_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                           bool causal) {
  const int dev = q.device().index;
  const int64_t BH = q.size(0) * q.size(1), len = q.size(2);
  dispatch(q.dtype(), q.size(3), [&]<typename T, int D>() {
    const size_t smem = forward_smem<T, D>();
    set_smem(reinterpret_cast<const void*>(&forward_kernel<T, D>), smem, dev, "attention");
    const dim3 grid(unsigned(ceil_div(len, kBlockRows)), unsigned(BH));
    forward_kernel<T, D><<<grid, kWarps * 32, smem, stream_for(dev)>>>(ptr<const T>(q), ptr<const T>(k),
                                                                       ptr<const T>(v), ptr<T>(out), ptr<float>(lse),
                                                                       len, scale, causal);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void tensor_core_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& lse, const Tensor& dd, Tensor& dq, Tensor& dk, Tensor& dv,
                                    float scale, bool causal) {
  const int dev = q.device().index;
  const int64_t BH = q.size(0) * q.size(1), len = q.size(2);
  const char* op = "attention_backward";
  dispatch(q.dtype(), q.size(3), [&]<typename T, int D>() {
    const dim3 grid(unsigned(ceil_div(len, kBlockRows)), unsigned(BH));
    const size_t smem_dq = dq_smem<T, D>(), smem_kv = dkdv_smem<T, D>();
    set_smem(reinterpret_cast<const void*>(&dq_kernel<T, D>), smem_dq, dev, op);
    dq_kernel<T, D><<<grid, kWarps * 32, smem_dq, stream_for(dev)>>>(
        ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const T>(dout), ptr<const float>(lse),
        ptr<const float>(dd), ptr<T>(dq), len, scale, causal);
    KILN_CUDA_CHECK_LAUNCH();
    set_smem(reinterpret_cast<const void*>(&dkdv_kernel<T, D>), smem_kv, dev, op);
    dkdv_kernel<T, D><<<grid, kWarps * 32, smem_kv, stream_for(dev)>>>(
        ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const T>(dout), ptr<const float>(lse),
        ptr<const float>(dd), ptr<T>(dk), ptr<T>(dv), len, scale, causal);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
