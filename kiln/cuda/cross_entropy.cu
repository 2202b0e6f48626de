// Fused cross-entropy: per-row loss and dlogits in one kernel.
//
//  loss[i]       = logsumexp(logits[i]) - logits[i, t_i]     (0 where t_i == ignore_index)
//  dlogits[i, j] = (softmax(logits[i])_j - [j == t_i]) * scale (0 rows where ignored)
//
// logits [N, C] contiguous; targets [N] i32/i64; losses [N] f32 or logits'
// dtype; dlogits (optional) contiguous, either like logits (and may be
// logits itself: each element is read before the same thread overwrites it,
// and the target logit is read before the first barrier) or bf16/f16 beside
// f32 logits: the gradient rounded as it is written, so that autocast's head
// gets its bf16 gradient without a second pass over the logits to cast them.
//
// Two passes over a row: the max and the sum of exponentials together
// (online, as FlashAttention's softmax: the sum is rescaled when the max
// grows), then the gradient. f32 rows whose length is a multiple of 4 are
// read 16 bytes a lane. A warp per row when C <= 1024; otherwise a block of
// 1,024 threads per row, so that few rows are in flight and the second
// pass finds its row in L2. f32 compute for bf16/f16.
// A target outside [0, C) that is not ignore_index is recorded in the
// device's input-check slots and thrown at the next synchronisation
// (cuda_util.h); its row gets no loss and no gradient.
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

// A running max and the sum of exp(x - max) over what has been seen.
template <typename A>
struct MaxSum {
  A m, s;
};

// exp(from - to), exactly 1 where they are equal (so -inf to -inf is 1, not NaN).
template <typename A>
__device__ __forceinline__ A rescale(A from, A to) {
  return from == to ? A(1) : exp_acc(from - to);
}

// exp(x - m) for x <= m, 0 for x = -inf (m may be -inf too).
template <typename A>
__device__ __forceinline__ A exp_below(A x, A m) {
  return x == neg_infinity<A>() ? A(0) : exp_acc(x - m);
}

template <typename A>
__device__ __forceinline__ MaxSum<A> combine(MaxSum<A> a, MaxSum<A> b) {
  const A m = max_nan(a.m, b.m);
  return {m, a.s * rescale(a.m, m) + b.s * rescale(b.m, m)};
}

template <typename A>
__device__ __forceinline__ MaxSum<A> warp_combine(MaxSum<A> v) {
  for (int o = 16; o > 0; o >>= 1)
    v = combine(v, MaxSum<A>{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  return v;
}

// GROUP == 32: a warp's lanes; otherwise the whole block (blockDim.x == GROUP).
template <int GROUP, typename A>
__device__ __forceinline__ MaxSum<A> group_combine(MaxSum<A> v) {
  v = warp_combine(v);
  if constexpr (GROUP > 32) {
    __shared__ A m_of[32], s_of[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
      m_of[warp] = v.m;
      s_of[warp] = v.s;
    }
    __syncthreads();
    v = lane < GROUP / 32 ? MaxSum<A>{m_of[lane], s_of[lane]} : MaxSum<A>{neg_infinity<A>(), A(0)};
    v = warp_combine(v);
  }
  return v;
}

__device__ __forceinline__ uint32_t bits16(bf16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ uint32_t bits16(f16 v) { return __half_as_ushort(v); }

// Four neighbouring outputs in one store (16 bytes of f32, 8 of bf16/f16).
template <typename D>
__device__ __forceinline__ void store_four(D* p, float a, float b, float c, float d) {
  if constexpr (sizeof(D) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
  } else {
    const uint2 packed{bits16(from_acc<D>(a)) | bits16(from_acc<D>(b)) << 16,
                       bits16(from_acc<D>(c)) | bits16(from_acc<D>(d)) << 16};
    *reinterpret_cast<uint2*>(p) = packed;
  }
}

// BLOCK threads, GROUP of them per row. vec4: T is float, C % 4 == 0 and
// both row pointers aligned for four elements.
template <typename T, typename D, int GROUP, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
    cross_entropy_kernel(const T* logits, const void* targets, bool targets_i64, void* losses, bool losses_f32,
                         D* dlogits, float scale, int64_t ignore_index, int64_t rows, int64_t C, bool vec4,
                         int* error_flag) {
  using A = Acc<T>;
  const int64_t row = blockIdx.x * int64_t(BLOCK / GROUP) + threadIdx.x / GROUP;
  const int lane = threadIdx.x % GROUP;
  if (row >= rows) return;  // only whole warps leave (GROUP == 32), or the whole block
  const T* x = logits + row * C;
  const int64_t t = load_index(targets, targets_i64, row);
  const bool ignored = t == ignore_index;
  const bool bad = !ignored && (t < 0 || t >= C);
  if (bad && lane == 0) atomicCAS(error_flag, 0, int(row < (int64_t(1) << 30) ? row : (int64_t(1) << 30)) + 1);
  const bool counts = !ignored && !bad;
  const A x_target = counts ? to_acc(x[t]) : A(0);

  MaxSum<A> ms{neg_infinity<A>(), A(0)};
  if constexpr (sizeof(T) == 4 && sizeof(A) == 4) {
    if (vec4) {
      const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll 4
      for (int64_t j = lane; j < C / 4; j += GROUP) {
        const float4 v = x4[j];
        const A m = max_nan(max_nan(ms.m, max_nan(v.x, v.y)), max_nan(v.z, v.w));
        ms.s = ms.s * rescale(ms.m, m) + exp_below(v.x, m) + exp_below(v.y, m) + exp_below(v.z, m) +
               exp_below(v.w, m);
        ms.m = m;
      }
    }
  }
  if (!vec4 || sizeof(T) != 4 || sizeof(A) != 4) {
    for (int64_t j = lane; j < C; j += GROUP) {
      const A v = to_acc(x[j]), m = max_nan(ms.m, v);
      ms.s = ms.s * rescale(ms.m, m) + exp_below(v, m);
      ms.m = m;
    }
  }
  ms = group_combine<GROUP>(ms);

  if (lane == 0) {
    const A loss = counts ? ms.m + log_acc(ms.s) - x_target : A(0);
    if (losses_f32)
      static_cast<float*>(losses)[row] = float(loss);
    else
      static_cast<T*>(losses)[row] = from_acc<T>(loss);
  }
  if (!dlogits) return;
  D* d = dlogits + row * C;
  const A inv = A(1) / ms.s, sc = A(scale), m = ms.m;
  auto grad = [&](A v, int64_t j) {
    return counts ? (exp_acc(v - m) * inv - (j == t ? A(1) : A(0))) * sc : A(0);
  };
  if constexpr (sizeof(T) == 4 && sizeof(A) == 4) {
    if (vec4) {
      const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll 4
      for (int64_t j = lane; j < C / 4; j += GROUP) {
        const float4 v = x4[j];
        store_four(d + 4 * j, grad(v.x, 4 * j), grad(v.y, 4 * j + 1), grad(v.z, 4 * j + 2), grad(v.w, 4 * j + 3));
      }
      return;
    }
  }
  for (int64_t j = lane; j < C; j += GROUP) d[j] = from_acc<D>(grad(to_acc(x[j]), j));
}

}  // namespace

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& dlogits,
                                float dlogits_scale, int64_t ignore_index) {
  const char* op = "cross_entropy";
  check_cuda(logits, op, "logits");
  check_cuda(targets, op, "targets");
  check_cuda(losses, op, "losses");
  check_same_device(logits, targets, op);
  check_same_device(logits, losses, op);
  check_contiguous(logits, op, "logits");
  KILN_CHECK(logits.dim() == 2, "cross_entropy: logits must be [N, C], got ", shape_str(logits.shape()));
  const int64_t N = logits.size(0), C = logits.size(1);
  KILN_CHECK(targets.dtype() == DType::i32 || targets.dtype() == DType::i64,
             "cross_entropy: targets must be i32 or i64, got ", dtype_name(targets.dtype()));
  check_shape(targets, {N}, op, "targets");
  check_shape(losses, {N}, op, "losses");
  KILN_CHECK(losses.dtype() == DType::f32 || losses.dtype() == logits.dtype(), "cross_entropy: losses must be f32 or ",
             dtype_name(logits.dtype()), ", got ", dtype_name(losses.dtype()));
  Tensor tgt = contiguous_or_copy(targets);
  Tensor loss_out = losses.is_contiguous() ? losses : empty_workspace(losses.shape(), losses.dtype(), losses.device());
  const bool narrowed = dlogits.defined() && dlogits.dtype() != logits.dtype();
  if (dlogits.defined()) {
    check_cuda(dlogits, op, "dlogits");
    check_same_device(logits, dlogits, op);
    check_contiguous(dlogits, op, "dlogits");
    check_shape(dlogits, logits.shape(), op, "dlogits");
    KILN_CHECK(!narrowed || (logits.dtype() == DType::f32 &&
                             (dlogits.dtype() == DType::bf16 || dlogits.dtype() == DType::f16)),
               "cross_entropy: dlogits must be ", dtype_name(logits.dtype()),
               logits.dtype() == DType::f32 ? ", bf16 or f16" : "", ", got ", dtype_name(dlogits.dtype()));
  }
  if (N == 0) return;
  KILN_CHECK(C > 0, "cross_entropy: logits have no classes (C = 0)");
  const int dev = logits.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  int* flag = input_check_slot(dev, InputCheck::cross_entropy, [C, ignore_index](int64_t row) {
    return ::kiln::detail::concat("cross_entropy: targets[", row, "] is outside [0, ", C,
                                  ") and is not ignore_index (", ignore_index, ")");
  });
  const bool vec4 = logits.dtype() == DType::f32 && C % 4 == 0 && aligned_to(logits, 16) &&
                    (!dlogits.defined() || aligned_to(dlogits, 4 * dtype_size(dlogits.dtype())));
  auto launch = [&]<typename T, typename D>() {
    D* dl = dlogits.defined() ? ptr<D>(dlogits) : nullptr;
    const bool i64 = tgt.dtype() == DType::i64, f32 = loss_out.dtype() == DType::f32;
    if (C <= 1024)
      cross_entropy_kernel<T, D, 32, 256><<<unsigned(ceil_div(N, 8)), 256, 0, stream>>>(
          ptr<const T>(logits), tgt.data_ptr(), i64, loss_out.data_ptr(), f32, dl, dlogits_scale, ignore_index, N, C,
          vec4, flag);
    else
      cross_entropy_kernel<T, D, 1024, 1024><<<unsigned(N), 1024, 0, stream>>>(
          ptr<const T>(logits), tgt.data_ptr(), i64, loss_out.data_ptr(), f32, dl, dlogits_scale, ignore_index, N, C,
          vec4, flag);
  };
  if (narrowed && dlogits.dtype() == DType::bf16)
    launch.template operator()<float, bf16>();
  else if (narrowed)
    launch.template operator()<float, f16>();
  else
    dispatch_floating(logits.dtype(), op, [&]<typename T>() { launch.template operator()<T, T>(); });
  KILN_CUDA_CHECK_LAUNCH();
  if (!loss_out.same_storage(losses) || loss_out.data_ptr() != losses.data_ptr()) copy_on_device(loss_out, losses);
}

}  // namespace kiln::cuda
