// Tensor-core attention for bf16 and f16 with head dims 64 and 128 (GPT-2's
// and Llama's shapes), in FlashAttention-2's form: an online softmax with the
// scores, probabilities and output in registers, so the T x T matrix never
// exists; a backward that recomputes P from the saved lse in a dQ pass and a
// dK/dV pass (no atomics: the result is the same on every run).
//
// Every product is `mma.sync.m16n8k16` with f32 accumulation. A warp owns 16
// rows (queries; keys in the dK/dV pass) and a block of 4 warps 64; the other
// side streams through shared memory in tiles of N rows, double-buffered with
// cp.async so the next tile loads while this one is multiplied. Operands come
// from shared memory through ldmatrix (.trans for the right-hand side of
// P V, dS K, P^T dO and dS^T Q). An accumulator's fragment (rows g, g + 8 of
// the warp's 16, two adjacent columns per n8 tile) is the A fragment of the
// next product once rounded to the input type, so P and dS never leave
// registers; they are rounded as FlashAttention-2 rounds them. Row statistics
// stay f32 and are reduced over the four lanes that share a row.
//
// Heads are read and written in place through [B, H, T, D] views with unit
// stride along D and 16-byte aligned rows, so the heads of a packed q|k|v
// projection, and its gradient, need no copies.
#include <type_traits>

#include "kiln/cuda/attention_common.cuh"
#include "kiln/cuda/attention_tc.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kWarpRows = 16;
constexpr int kBlockRows = kWarps * kWarpRows;  // 64 rows a block owns
constexpr float kLog2e = 1.4426950408889634f;

// Shared tiles are [rows][D + 8]: rows stay 16-byte aligned for cp.async and
// ldmatrix, and the 16 extra bytes put the 8 rows one ldmatrix reads in 8
// different bank groups.
template <int D>
constexpr int kPitch = D + 8;

// Streamed rows per step: 64 in the forward; the backward keeps two score
// tiles and two D-wide accumulators live, so head dim 128 streams 32.
template <int D>
constexpr int kBackwardTile = D == 64 ? 64 : 32;

// A [B, H, T, D] view, unit stride along D.
template <typename T>
struct Heads {
  T* p;
  int64_t sb, sh, st;
  int heads;
  __device__ __forceinline__ T* head(int bh) const { return p + (bh / heads) * sb + (bh % heads) * sh; }
};

template <typename T>
Heads<T> heads_of(const Tensor& t) {
  return {reinterpret_cast<T*>(t.data_ptr()), t.stride(0), t.stride(1), t.stride(2), int(t.size(1))};
}

// ---- PTX wrappers ----------------------------------------------------------

// 16 bytes global -> shared without passing through registers; a row past
// the end is zero-filled (a source size of 0 reads nothing).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned s = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most one group (the tile being prefetched) is in flight.
__device__ __forceinline__ void cp_async_wait_all_but_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  const unsigned s = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned s = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// c[16 x 8] += a[16 x 16] b[16 x 8], f32 accumulators.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, bf16>)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to T, the first in the low half (the lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, bf16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// ---- tiles and warp products -----------------------------------------------
// Fragment coordinates, lane = 4 g + t: accumulator c[j][e] of a 16 x N
// product is row g + 8 (e / 2), column 8 j + 2 t + e % 2.

// Rows [row0, row0 + ROWS) of one head into a shared tile, asynchronously.
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_rows_async(T* dst, const T* head, int64_t st, int64_t row0, int64_t len) {
  constexpr int kVec = 16 / sizeof(T), kPerRow = D / kVec;
  for (int e = threadIdx.x; e < ROWS * kPerRow; e += blockDim.x) {
    const int r = e / kPerRow, c = (e % kPerRow) * kVec;
    const bool valid = row0 + r < len;
    cp_async16(dst + r * kPitch<D> + c, head + (valid ? (row0 + r) * st + c : 0), valid);
  }
}

// A fragments of 16 rows of a shared tile, one per 16 columns of D.
template <int D, typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[D / 16][4], const T* rows) {
  const int lane = threadIdx.x % 32, mi = lane / 8;
  const T* p = rows + (lane % 8 + (mi % 2) * 8) * kPitch<D> + (mi / 2) * 8;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(a[kk], p + kk * 16);
}

// s[16 x N] = A B^T: A in fragments (16 x D), B the N rows of a shared tile
// (Q K^T, dO V^T, K Q^T, V dO^T).
template <typename T, int D, int N>
__device__ __forceinline__ void product_abt(float (&s)[N / 8][4], const uint32_t (&a)[D / 16][4], const T* b) {
  const int lane = threadIdx.x % 32, mi = lane / 8;
  const T* p = b + (lane % 8 + (mi / 2) * 8) * kPitch<D> + (mi % 2) * 8;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int j = 0; j < N / 16; ++j) {
      uint32_t r[4];
      ldmatrix_x4(r, p + j * 16 * kPitch<D> + kk * 16);
      mma<T>(s[2 * j], a[kk], r[0], r[1]);
      mma<T>(s[2 * j + 1], a[kk], r[2], r[3]);
    }
}

// o[16 x D] += P B: P in fragments (16 x N), B the N rows of a shared tile
// (P V, dS K, P^T dO, dS^T Q).
template <typename T, int D, int N>
__device__ __forceinline__ void product_pb(float (&o)[D / 8][4], const uint32_t (&p)[N / 16][4], const T* b) {
  const int lane = threadIdx.x % 32, mi = lane / 8;
  const T* base = b + (lane % 8 + (mi % 2) * 8) * kPitch<D> + (mi / 2) * 8;
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk)
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      uint32_t r[4];
      ldmatrix_x4_trans(r, base + kk * 16 * kPitch<D> + n * 16);
      mma<T>(o[2 * n], p[kk], r[0], r[1]);
      mma<T>(o[2 * n + 1], p[kk], r[2], r[3]);
    }
}

// The accumulators of a 16 x N product as the A fragments of the next one.
template <typename T, int N>
__device__ __forceinline__ void to_a(uint32_t (&a)[N / 16][4], const float (&c)[N / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    a[kk][0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

// A warp's 16 x D accumulators to rows [row0, row0 + 16) of a head (those
// below len), row r of the pair (g, g + 8) times scale[r].
template <typename T, int D>
__device__ __forceinline__ void store_rows(T* head, int64_t st, const float (&acc)[D / 8][4], int64_t row0,
                                           int64_t len, const float (&scale)[2]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + g + 8 * r;
    if (row >= len) continue;
    T* dst = head + row * st + 2 * t;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(dst + 8 * n) = pack2<T>(acc[n][2 * r] * scale[r], acc[n][2 * r + 1] * scale[r]);
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---- forward ---------------------------------------------------------------

template <typename T, int D>
constexpr size_t forward_smem() {
  return sizeof(T) * kPitch<D> * (kBlockRows + 4 * 64);  // Q, and K and V double-buffered
}

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    forward_kernel(Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<T> out, float* lse, int64_t len,
                   float scale_log2, bool causal) {
  constexpr int N = 64, P = kPitch<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kBlockRows * P;  // [2][N][P]
  T* sV = sK + 2 * N * P;       // [2][N][P]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int bh = blockIdx.y;
  const int64_t q0 = int64_t(gridDim.x - 1 - blockIdx.x) * kBlockRows;  // the longest causal blocks start first
  const T* qh = q.head(bh);
  const T* kh = k.head(bh);
  const T* vh = v.head(bh);
  const int64_t k_end = causal ? min(q0 + kBlockRows, len) : len;
  const int tiles = int((k_end + N - 1) / N);
  load_rows_async<T, D, kBlockRows>(sQ, qh, q.st, q0, len);
  load_rows_async<T, D, N>(sK, kh, k.st, 0, len);
  load_rows_async<T, D, N>(sV, vh, v.st, 0, len);
  cp_async_commit();

  const int64_t row[2] = {q0 + warp * kWarpRows + g, q0 + warp * kWarpRows + g + 8};
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {neg_infinity<float>(), neg_infinity<float>()}, l[2] = {0.f, 0.f};  // l: this lane's columns only
  uint32_t qa[D / 16][4];
  for (int it = 0; it < tiles; ++it) {
    const int buf = it & 1;
    if (it + 1 < tiles) {
      load_rows_async<T, D, N>(sK + (buf ^ 1) * N * P, kh, k.st, int64_t(it + 1) * N, len);
      load_rows_async<T, D, N>(sV + (buf ^ 1) * N * P, vh, v.st, int64_t(it + 1) * N, len);
    }
    cp_async_commit();  // an empty group on the last tile keeps the count uniform
    cp_async_wait_all_but_one();
    __syncthreads();
    if (it == 0) load_a<D>(qa, sQ + warp * kWarpRows * P);
    float s[N / 8][4];
    product_abt<T, D, N>(s, qa, sK + buf * N * P);
    // Scores in log2 units; keys past the end, and causally after the row, are -inf.
    const int64_t k0 = int64_t(it) * N;
    const bool edge = k0 + N > len || (causal && k0 + N > q0);
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[j][e] * scale_log2;
        if (edge) {
          const int64_t col = k0 + 8 * j + 2 * t + e % 2;
          if (col >= len || (causal && col > row[e / 2])) x = neg_infinity<float>();
        }
        s[j][e] = x;
        mx[e / 2] = fmaxf(mx[e / 2], x);
      }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);
      base[r] = mx[r] == neg_infinity<float>() ? 0.f : mx[r];  // no valid key yet: p = 0, nothing to rescale
      const float corr = exp2f(m[r] - base[r]);
      l[r] *= corr;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) o[n][2 * r] *= corr, o[n][2 * r + 1] *= corr;
      m[r] = mx[r];
    }
    // A NaN score is skipped by fmaxf but makes its p, and so its row's sum and output, NaN.
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[j][e] - base[e / 2]);
        s[j][e] = p;
        l[e / 2] += p;
      }
    uint32_t pa[N / 16][4];
    to_a<T, N>(pa, s);
    product_pb<T, D, N>(o, pa, sV + buf * N * P);
    __syncthreads();  // this tile's buffers are consumed before the next prefetch reuses them
  }
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    inv[r] = 1.f / l[r];
    if (t == 0 && row[r] < len) lse[int64_t(bh) * len + row[r]] = (m[r] + log2f(l[r])) / kLog2e;
  }
  store_rows<T, D>(out.head(bh), out.st, o, q0 + warp * kWarpRows, len, inv);
}

// ---- backward: dQ ----------------------------------------------------------

template <typename T, int D>
constexpr size_t dq_smem() {
  return sizeof(T) * kPitch<D> * (2 * kBlockRows + 4 * kBackwardTile<D>) + sizeof(float) * kBlockRows;
}

// dq = scale * dS K for 64 query rows, dS = P (dP - dd), P recomputed from
// lse and dP = dO V^T, streaming key tiles. Also writes dd = rowsum(dO * O),
// which the dK/dV pass launched after it reads.
template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    dq_kernel(Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<const T> dout, Heads<const T> out,
              const float* lse, float* dd, Heads<T> dq, int64_t len, float scale, float scale_log2, bool causal) {
  constexpr int N = kBackwardTile<D>, P = kPitch<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sdO = sQ + kBlockRows * P;
  T* sK = sdO + kBlockRows * P;  // [2][N][P]
  T* sV = sK + 2 * N * P;        // [2][N][P]
  float* sDd = reinterpret_cast<float*>(sV + 2 * N * P);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int bh = blockIdx.y;
  const int64_t q0 = int64_t(gridDim.x - 1 - blockIdx.x) * kBlockRows;
  const T* kh = k.head(bh);
  const T* vh = v.head(bh);
  load_rows_async<T, D, kBlockRows>(sQ, q.head(bh), q.st, q0, len);
  load_rows_async<T, D, kBlockRows>(sdO, dout.head(bh), dout.st, q0, len);
  load_rows_async<T, D, N>(sK, kh, k.st, 0, len);
  load_rows_async<T, D, N>(sV, vh, v.st, 0, len);
  cp_async_commit();

  // dd of the warp's rows, lanes 2r and 2r + 1 taking half a row each, from global memory.
  {
    const int r = lane / 2, half = lane % 2;
    const int64_t qi = q0 + warp * kWarpRows + r;
    float sum = 0.f;
    if (qi < len) {
      const T* a = dout.head(bh) + qi * dout.st + half * (D / 2);
      const T* b = out.head(bh) + qi * out.st + half * (D / 2);
      for (int d = 0; d < D / 2; d += 8) {
        const uint4 va = *reinterpret_cast<const uint4*>(a + d), vb = *reinterpret_cast<const uint4*>(b + d);
        const T* ea = reinterpret_cast<const T*>(&va);
        const T* eb = reinterpret_cast<const T*>(&vb);
#pragma unroll
        for (int i = 0; i < 8; ++i) sum += to_acc(ea[i]) * to_acc(eb[i]);
      }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (half == 0) {
      sDd[warp * kWarpRows + r] = sum;
      if (qi < len) dd[int64_t(bh) * len + qi] = sum;
    }
    __syncwarp();
  }
  const int64_t row[2] = {q0 + warp * kWarpRows + g, q0 + warp * kWarpRows + g + 8};
  float lse2[2], ddr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lse2[r] = row[r] < len ? lse[int64_t(bh) * len + row[r]] * kLog2e : 0.f;
    ddr[r] = sDd[warp * kWarpRows + g + 8 * r];
  }

  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  uint32_t qa[D / 16][4], da[D / 16][4];
  const int64_t k_end = causal ? min(q0 + kBlockRows, len) : len;
  const int tiles = int((k_end + N - 1) / N);
  for (int it = 0; it < tiles; ++it) {
    const int buf = it & 1;
    if (it + 1 < tiles) {
      load_rows_async<T, D, N>(sK + (buf ^ 1) * N * P, kh, k.st, int64_t(it + 1) * N, len);
      load_rows_async<T, D, N>(sV + (buf ^ 1) * N * P, vh, v.st, int64_t(it + 1) * N, len);
    }
    cp_async_commit();
    cp_async_wait_all_but_one();
    __syncthreads();
    if (it == 0) {
      load_a<D>(qa, sQ + warp * kWarpRows * P);
      load_a<D>(da, sdO + warp * kWarpRows * P);
    }
    float s[N / 8][4], dp[N / 8][4];
    product_abt<T, D, N>(s, qa, sK + buf * N * P);
    product_abt<T, D, N>(dp, da, sV + buf * N * P);
    const int64_t k0 = int64_t(it) * N;
    const bool edge = k0 + N > len || (causal && k0 + N > q0);
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = exp2f(s[j][e] * scale_log2 - lse2[e / 2]);
        if (edge) {
          const int64_t col = k0 + 8 * j + 2 * t + e % 2;
          if (col >= len || (causal && col > row[e / 2])) p = 0.f;
        }
        s[j][e] = p * (dp[j][e] - ddr[e / 2]);
      }
    uint32_t dsa[N / 16][4];
    to_a<T, N>(dsa, s);
    product_pb<T, D, N>(acc, dsa, sK + buf * N * P);
    __syncthreads();
  }
  const float sc[2] = {scale, scale};
  store_rows<T, D>(dq.head(bh), dq.st, acc, q0 + warp * kWarpRows, len, sc);
}

// ---- backward: dK and dV ---------------------------------------------------

template <typename T, int D>
constexpr size_t dkdv_smem() {
  constexpr int N = kBackwardTile<D>;
  return sizeof(T) * kPitch<D> * (2 * kBlockRows + 4 * N) + sizeof(float) * 4 * N;
}

// lse (in log2 units) and dd of query rows [t0, t0 + N) into shared memory.
template <int N>
__device__ __forceinline__ void load_row_stats(float* s_lse, float* s_dd, const float* lse, const float* dd,
                                               int64_t t0, int64_t len) {
  for (int i = threadIdx.x; i < N; i += blockDim.x) {
    const bool in = t0 + i < len;
    s_lse[i] = in ? lse[t0 + i] * kLog2e : 0.f;
    s_dd[i] = in ? dd[t0 + i] : 0.f;
  }
}

// dk = scale * dS^T Q and dv = P^T dO for 64 key rows, streaming query tiles
// (causal: from the block's first key on). S^T = K Q^T and dP^T = V dO^T are
// recomputed with the keys as rows.
template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    dkdv_kernel(Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<const T> dout, const float* lse,
                const float* dd, Heads<T> dk, Heads<T> dv, int64_t len, float scale, float scale_log2, bool causal) {
  constexpr int N = kBackwardTile<D>, P = kPitch<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + kBlockRows * P;
  T* sQ = sV + kBlockRows * P;   // [2][N][P]
  T* sdO = sQ + 2 * N * P;       // [2][N][P]
  float* sLse = reinterpret_cast<float*>(sdO + 2 * N * P);  // [2][N]
  float* sDd = sLse + 2 * N;                                 // [2][N]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int bh = blockIdx.y;
  const int64_t k0 = int64_t(blockIdx.x) * kBlockRows;  // low keys have the most causal work and start first
  const T* qh = q.head(bh);
  const T* dh = dout.head(bh);
  const float* lse_h = lse + int64_t(bh) * len;
  const float* dd_h = dd + int64_t(bh) * len;
  const int64_t t_begin = causal ? k0 : 0;
  const int tiles = int((len - t_begin + N - 1) / N);
  load_rows_async<T, D, kBlockRows>(sK, k.head(bh), k.st, k0, len);
  load_rows_async<T, D, kBlockRows>(sV, v.head(bh), v.st, k0, len);
  load_rows_async<T, D, N>(sQ, qh, q.st, t_begin, len);
  load_rows_async<T, D, N>(sdO, dh, dout.st, t_begin, len);
  cp_async_commit();
  load_row_stats<N>(sLse, sDd, lse_h, dd_h, t_begin, len);

  const int64_t key[2] = {k0 + warp * kWarpRows + g, k0 + warp * kWarpRows + g + 8};
  float acc_k[D / 8][4], acc_v[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_k[n][e] = acc_v[n][e] = 0.f;
  for (int it = 0; it < tiles; ++it) {
    const int buf = it & 1;
    const int64_t t0 = t_begin + int64_t(it) * N;
    if (it + 1 < tiles) {
      load_rows_async<T, D, N>(sQ + (buf ^ 1) * N * P, qh, q.st, t0 + N, len);
      load_rows_async<T, D, N>(sdO + (buf ^ 1) * N * P, dh, dout.st, t0 + N, len);
      load_row_stats<N>(sLse + (buf ^ 1) * N, sDd + (buf ^ 1) * N, lse_h, dd_h, t0 + N, len);
    }
    cp_async_commit();
    cp_async_wait_all_but_one();
    __syncthreads();
    const T* q_tile = sQ + buf * N * P;
    const T* do_tile = sdO + buf * N * P;
    const float* tile_lse = sLse + buf * N;
    const float* tile_dd = sDd + buf * N;
    uint32_t a[D / 16][4];
    load_a<D>(a, sK + warp * kWarpRows * P);  // reloaded per tile: keeping K and V in registers would spill
    float s[N / 8][4];
    product_abt<T, D, N>(s, a, q_tile);
    const bool edge = t0 + N > len || (causal && t0 < k0 + kBlockRows);
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * j + 2 * t + e % 2;
        float p = exp2f(s[j][e] * scale_log2 - tile_lse[c]);
        if (edge && (t0 + c >= len || (causal && key[e / 2] > t0 + c))) p = 0.f;
        s[j][e] = p;
      }
    uint32_t pa[N / 16][4];
    to_a<T, N>(pa, s);
    product_pb<T, D, N>(acc_v, pa, do_tile);
    load_a<D>(a, sV + warp * kWarpRows * P);
    float dp[N / 8][4];
    product_abt<T, D, N>(dp, a, do_tile);
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[j][e] = s[j][e] * (dp[j][e] - tile_dd[8 * j + 2 * t + e % 2]);
    to_a<T, N>(pa, dp);
    product_pb<T, D, N>(acc_k, pa, q_tile);
    __syncthreads();
  }
  const float sk[2] = {scale, scale}, one[2] = {1.f, 1.f};
  store_rows<T, D>(dk.head(bh), dk.st, acc_k, k0 + warp * kWarpRows, len, sk);
  store_rows<T, D>(dv.head(bh), dv.st, acc_v, k0 + warp * kWarpRows, len, one);
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

// The forward's last query block goes first, so blocks count from the end.
dim3 grid_for(const Tensor& q) {
  return dim3(unsigned(ceil_div(q.size(2), kBlockRows)), unsigned(q.size(0) * q.size(1)));
}

}  // namespace

bool tensor_core_attention_applies(const Tensor& q, std::initializer_list<const Tensor*> tensors) {
  if ((q.dtype() != DType::bf16 && q.dtype() != DType::f16) || (q.size(3) != 64 && q.size(3) != 128)) return false;
  // 16-byte row loads and stores: unit stride along D, every other stride a
  // multiple of 8 elements, and the start 16-byte aligned.
  for (const Tensor* t : tensors) {
    if (!aligned_to(*t, 16) || t->stride(3) != 1) return false;
    for (int d = 0; d < 3; ++d)
      if (t->stride(d) % 8 != 0) return false;
  }
  return true;
}

void tensor_core_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                           bool causal) {
  const int dev = q.device().index;
  const int64_t len = q.size(2);
  dispatch(q.dtype(), q.size(3), [&]<typename T, int D>() {
    const size_t smem = forward_smem<T, D>();
    set_smem(reinterpret_cast<const void*>(&forward_kernel<T, D>), smem, dev, "attention");
    forward_kernel<T, D><<<grid_for(q), kWarps * 32, smem, stream_for(dev)>>>(
        heads_of<const T>(q), heads_of<const T>(k), heads_of<const T>(v), heads_of<T>(out), ptr<float>(lse), len,
        scale * kLog2e, causal);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void tensor_core_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, Tensor& dd, Tensor& dq, Tensor& dk,
                                    Tensor& dv, float scale, bool causal) {
  const int dev = q.device().index;
  const int64_t len = q.size(2);
  const char* op = "attention_backward";
  dispatch(q.dtype(), q.size(3), [&]<typename T, int D>() {
    const size_t smem_dq = dq_smem<T, D>(), smem_kv = dkdv_smem<T, D>();
    set_smem(reinterpret_cast<const void*>(&dq_kernel<T, D>), smem_dq, dev, op);
    dq_kernel<T, D><<<grid_for(q), kWarps * 32, smem_dq, stream_for(dev)>>>(
        heads_of<const T>(q), heads_of<const T>(k), heads_of<const T>(v), heads_of<const T>(dout),
        heads_of<const T>(out), ptr<const float>(lse), ptr<float>(dd), heads_of<T>(dq), len, scale, scale * kLog2e,
        causal);
    KILN_CUDA_CHECK_LAUNCH();
    set_smem(reinterpret_cast<const void*>(&dkdv_kernel<T, D>), smem_kv, dev, op);
    dkdv_kernel<T, D><<<grid_for(q), kWarps * 32, smem_kv, stream_for(dev)>>>(
        heads_of<const T>(q), heads_of<const T>(k), heads_of<const T>(v), heads_of<const T>(dout),
        ptr<const float>(lse), ptr<const float>(dd), heads_of<T>(dk), heads_of<T>(dv), len, scale, scale * kLog2e,
        causal);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
