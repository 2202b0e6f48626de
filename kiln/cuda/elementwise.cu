// unary and binary elementwise ops (f32, f64, bf16, f16; bf16/f16 compute in f32).
//
//  *_contiguous_kernel  every operand dense: 16-byte vector loads and stores
//                       (4 f32, 8 bf16/f16, 2 f64 per access) when all
//                       pointers are 16-byte aligned, a scalar tail after.
//  *_strided_kernel     any strides (transposed, sliced, broadcast views with
//                       stride 0): one thread per output element.
//
// The op is a runtime argument, uniform across the grid, so each dtype
// compiles two kernels per family instead of one per op. Binary operands are
// already expanded to the output's shape (backend.h), so broadcasting is just
// stride 0. out may alias an input with the same layout (in-place ops).
// pow uses f64 pow: powf under --use_fast_math is exp2(y*log2(x)), which is
// NaN for negative bases even with integer exponents.
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"
#include "kiln/cuda/strided.h"

namespace kiln::cuda {
namespace {

constexpr int kBlock = 256;

template <typename T>
struct alignas(16) Pack {
  static constexpr int n = 16 / sizeof(T);
  T v[n];
};

template <typename A>
__device__ __forceinline__ A unary_apply(UnaryOp op, A x, A s) {
  switch (op) {
    case UnaryOp::neg:
      return -x;
    case UnaryOp::exp:
      return exp_acc(x);
    case UnaryOp::log:
      return log_acc(x);
    case UnaryOp::sqrt:
      return sqrt_acc(x);
    case UnaryOp::rsqrt:
      return A(1) / sqrt_acc(x);
    case UnaryOp::tanh:
      return tanh_accurate(x);
    case UnaryOp::sigmoid:
      return A(1) / (A(1) + exp_acc(-x));
    case UnaryOp::relu:
      return x < A(0) ? A(0) : x;  // NaN stays NaN, as torch.relu
    case UnaryOp::gelu:
      return gelu(x);
    case UnaryOp::gelu_erf:
      return gelu_erf(x);
    case UnaryOp::abs:
      return x < A(0) ? -x : x;
    case UnaryOp::square:
      return x * x;
    case UnaryOp::reciprocal:
      return A(1) / x;
    case UnaryOp::add_scalar:
      return x + s;
    case UnaryOp::mul_scalar:
      return x * s;
    case UnaryOp::pow_scalar:
      return A(pow(double(x), double(s)));
  }
  return x;
}

template <typename A>
__device__ __forceinline__ A binary_apply(BinaryOp op, A a, A b) {
  switch (op) {
    case BinaryOp::add:
      return a + b;
    case BinaryOp::sub:
      return a - b;
    case BinaryOp::mul:
      return a * b;
    case BinaryOp::div:
      return a / b;
    case BinaryOp::maximum:
      return max_nan(a, b);
    case BinaryOp::minimum:
      return min_nan(a, b);
    case BinaryOp::pow:
      return A(pow(double(a), double(b)));
    case BinaryOp::eq:
      return a == b ? A(1) : A(0);
    case BinaryOp::gt:
      return a > b ? A(1) : A(0);
    case BinaryOp::lt:
      return a < b ? A(1) : A(0);
    case BinaryOp::relu_backward:
      return b <= A(0) ? A(0) : a;  // torch's threshold_backward: NaN passes
    case BinaryOp::gelu_backward:
      return a * gelu_grad(b);
    case BinaryOp::gelu_erf_backward:
      return a * gelu_erf_grad(b);
    case BinaryOp::tanh_backward:
      return a * (A(1) - b * b);
    case BinaryOp::sigmoid_backward:
      return a * b * (A(1) - b);
  }
  return a;
}

template <typename T>
__global__ void unary_contiguous_kernel(T* out, const T* x, int64_t n, UnaryOp op, Acc<T> s, bool vectorized) {
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vectorized) {
    constexpr int V = Pack<T>::n;
    const int64_t packs = n / V;
    for (int64_t p = tid; p < packs; p += step) {
      Pack<T> in = reinterpret_cast<const Pack<T>*>(x)[p], res;
#pragma unroll
      for (int j = 0; j < V; ++j) res.v[j] = from_acc<T>(unary_apply(op, to_acc(in.v[j]), s));
      reinterpret_cast<Pack<T>*>(out)[p] = res;
    }
    done = packs * V;
  }
  for (int64_t i = done + tid; i < n; i += step) out[i] = from_acc<T>(unary_apply(op, to_acc(x[i]), s));
}

template <typename T>
__global__ void unary_strided_kernel(T* out, const T* x, StridedLayout<2> layout, int64_t n, UnaryOp op, Acc<T> s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    layout.offsets(i, off);
    out[off[0]] = from_acc<T>(unary_apply(op, to_acc(x[off[1]]), s));
  }
}

// B: b's element type, T's own or bf16/f16 beside f32 (Backend::binary).
template <typename T, typename B>
__global__ void binary_contiguous_kernel(T* out, const T* a, const B* b, int64_t n, BinaryOp op, bool vectorized) {
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vectorized) {
    constexpr int V = Pack<T>::n;
    const int64_t packs = n / V;
    for (int64_t p = tid; p < packs; p += step) {
      Pack<T> pa = reinterpret_cast<const Pack<T>*>(a)[p], res;
      VecOf<B, V> pb = reinterpret_cast<const VecOf<B, V>*>(b)[p];
#pragma unroll
      for (int j = 0; j < V; ++j) res.v[j] = from_acc<T>(binary_apply(op, to_acc(pa.v[j]), to_acc(pb.v[j])));
      reinterpret_cast<Pack<T>*>(out)[p] = res;
    }
    done = packs * V;
  }
  for (int64_t i = done + tid; i < n; i += step) out[i] = from_acc<T>(binary_apply(op, to_acc(a[i]), to_acc(b[i])));
}

template <typename T, typename B>
__global__ void binary_strided_kernel(T* out, const T* a, const B* b, StridedLayout<3> layout, int64_t n, BinaryOp op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    layout.offsets(i, off);
    out[off[0]] = from_acc<T>(binary_apply(op, to_acc(a[off[1]]), to_acc(b[off[2]])));
  }
}

}  // namespace

void CudaBackend::unary(UnaryOp op, const Tensor& x, Tensor& out, double scalar) {
  check_cuda(x, "unary", "x");
  check_cuda(out, "unary", "out");
  check_same_device(x, out, "unary");
  check_shape(out, x.shape(), "unary", "out");
  check_dtype(out, x.dtype(), "unary", "out");
  const int64_t n = out.numel();
  if (n == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  StridedLayout<2> layout = make_layout<2>(out.shape(), {&out.strides(), &x.strides()});
  dispatch_floating(x.dtype(), "unary", [&]<typename T>() {
    const Acc<T> s = Acc<T>(scalar);
    if (layout.contiguous()) {
      const bool vec = aligned_to(x, 16) && aligned_to(out, 16);
      const int grid = grid_for(vec ? ceil_div(n, Pack<T>::n) : n, kBlock, dev);
      unary_contiguous_kernel<T><<<grid, kBlock, 0, stream>>>(ptr<T>(out), ptr<const T>(x), n, op, s, vec);
    } else {
      unary_strided_kernel<T>
          <<<grid_for(n, kBlock, dev), kBlock, 0, stream>>>(ptr<T>(out), ptr<const T>(x), layout, n, op, s);
    }
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  check_cuda(a, "binary", "a");
  check_cuda(b, "binary", "b");
  check_cuda(out, "binary", "out");
  check_same_device(a, out, "binary");
  check_same_device(b, out, "binary");
  check_shape(a, out.shape(), "binary", "a (expand it to the output shape first)");
  check_shape(b, out.shape(), "binary", "b (expand it to the output shape first)");
  check_dtype(a, out.dtype(), "binary", "a");
  const bool narrow_b = op == BinaryOp::add && out.dtype() == DType::f32 &&
                        (b.dtype() == DType::bf16 || b.dtype() == DType::f16);
  if (!narrow_b) check_dtype(b, out.dtype(), "binary", "b");
  const int64_t n = out.numel();
  if (n == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  StridedLayout<3> layout = make_layout<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()});
  auto launch = [&]<typename T, typename B>() {
    if (layout.contiguous()) {
      const bool vec = aligned_to(a, 16) && aligned_to(b, sizeof(B) * Pack<T>::n) && aligned_to(out, 16);
      const int grid = grid_for(vec ? ceil_div(n, Pack<T>::n) : n, kBlock, dev);
      binary_contiguous_kernel<T, B>
          <<<grid, kBlock, 0, stream>>>(ptr<T>(out), ptr<const T>(a), ptr<const B>(b), n, op, vec);
    } else {
      binary_strided_kernel<T, B><<<grid_for(n, kBlock, dev), kBlock, 0, stream>>>(ptr<T>(out), ptr<const T>(a),
                                                                                   ptr<const B>(b), layout, n, op);
    }
  };
  if (narrow_b && b.dtype() == DType::bf16)
    launch.template operator()<float, bf16>();
  else if (narrow_b)
    launch.template operator()<float, f16>();
  else
    dispatch_floating(out.dtype(), "binary", [&]<typename T>() { launch.template operator()<T, T>(); });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
