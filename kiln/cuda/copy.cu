// copy and fill.
//
//  copy_bits_kernel   same dtype, any strides: moves raw element bits (so NaN
//                     payloads survive), one thread per element, templated
//                     on the element size (1, 2, 4, 8 bytes).
//  cast_kernel<S, D>  different dtypes, any strides: D(S) through f64, as the
//                     CPU does (float -> int truncates; f64 -> bf16/f16 goes
//                     through f32, rounding to nearest even); four elements
//                     a load where both sides are contiguous and aligned.
//  fill_kernel        writes one precomputed bit pattern (converted on the
//                     host with the CPU's own float_to_bf16/float_to_f16).
//
// Host<->device: host-side strides are resolved on the host (CPU backend), the
// dtype cast happens on the device. H2D is asynchronous through pinned
// staging; D2H synchronises the stream (the caller reads the data next).
#include <cstring>

#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"
#include "kiln/cuda/strided.h"

namespace kiln::cuda {
namespace {

constexpr int kBlock = 256;

template <typename T>
__device__ __forceinline__ double to_f64(T x) {
  return double(x);
}
template <>
__device__ __forceinline__ double to_f64(bf16 x) {
  return double(__bfloat162float(x));
}
template <>
__device__ __forceinline__ double to_f64(f16 x) {
  return double(__half2float(x));
}

template <typename T>
__device__ __forceinline__ T from_f64(double v) {
  return T(v);
}
template <>
__device__ __forceinline__ bf16 from_f64(double v) {
  return __float2bfloat16_rn(float(v));
}
template <>
__device__ __forceinline__ f16 from_f64(double v) {
  return __float2half_rn(float(v));
}

template <typename Bits>
__global__ void copy_bits_kernel(Bits* dst, const Bits* src, StridedLayout<2> layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    layout.offsets(i, off);
    dst[off[0]] = src[off[1]];
  }
}

// Four elements moved as one load and one store (f32 -> bf16: 16 bytes in,
// 8 out), where both sides are contiguous and aligned to four elements.
template <typename T>
struct alignas(4 * sizeof(T)) Four {
  T v[4];
};

template <typename S, typename D>
__global__ void cast_kernel(D* dst, const S* src, StridedLayout<2> layout, int64_t n, bool contiguous) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  if (contiguous && reinterpret_cast<uintptr_t>(src) % sizeof(Four<S>) == 0 &&
      reinterpret_cast<uintptr_t>(dst) % sizeof(Four<D>) == 0) {
    const int64_t fours = n / 4;
    for (int64_t q = first; q < fours; q += step) {
      const Four<S> in = reinterpret_cast<const Four<S>*>(src)[q];
      Four<D> out;
#pragma unroll
      for (int e = 0; e < 4; ++e) out.v[e] = from_f64<D>(to_f64(in.v[e]));
      reinterpret_cast<Four<D>*>(dst)[q] = out;
    }
    for (int64_t i = fours * 4 + first; i < n; i += step) dst[i] = from_f64<D>(to_f64(src[i]));
    return;
  }
  for (int64_t i = first; i < n; i += step) {
    if (contiguous) {
      dst[i] = from_f64<D>(to_f64(src[i]));
    } else {
      int64_t off[2];
      layout.offsets(i, off);
      dst[off[0]] = from_f64<D>(to_f64(src[off[1]]));
    }
  }
}

template <typename Bits>
__global__ void fill_kernel(Bits* dst, Bits value, StridedLayout<1> layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1];
    layout.offsets(i, off);
    dst[off[0]] = value;
  }
}

// Calls f.template operator()<T>() with the device type of any dtype.
template <typename F>
void dispatch_any(DType t, F&& f) {
  switch (t) {
    case DType::f32:
      f.template operator()<float>();
      return;
    case DType::f64:
      f.template operator()<double>();
      return;
    case DType::bf16:
      f.template operator()<bf16>();
      return;
    case DType::f16:
      f.template operator()<f16>();
      return;
    case DType::i32:
      f.template operator()<int32_t>();
      return;
    case DType::i64:
      f.template operator()<int64_t>();
      return;
    case DType::u8:
      f.template operator()<uint8_t>();
      return;
  }
}

// Same element size -> the unsigned type of that size.
template <typename F>
void dispatch_bits(size_t element_size, F&& f) {
  switch (element_size) {
    case 1:
      f.template operator()<uint8_t>();
      return;
    case 2:
      f.template operator()<uint16_t>();
      return;
    case 4:
      f.template operator()<uint32_t>();
      return;
    case 8:
      f.template operator()<uint64_t>();
      return;
  }
  KILN_FAIL("copy: unsupported element size ", element_size);
}

Backend& cpu() { return backend_for(Device::cpu()); }

// A contiguous host tensor holding `t`'s values (t itself when already so).
Tensor host_contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor c = Tensor::empty(t.shape(), t.dtype(), Device::cpu());
  cpu().copy(t, c);
  return c;
}

void copy_host_to_device(const Tensor& src, Tensor& dst) {
  Tensor host = host_contiguous(src);
  const int dev = dst.device().index;
  if (dst.is_contiguous() && dst.dtype() == src.dtype()) {
    upload_async(host.data_ptr(), dst.data_ptr(), host.nbytes(), dev);
    return;
  }
  Tensor staged = empty_workspace(src.shape(), src.dtype(), dst.device());
  upload_async(host.data_ptr(), staged.data_ptr(), host.nbytes(), dev);
  copy_on_device(staged, dst);  // cast and scatter on the device; `staged` is freed in stream order
}

void copy_device_to_host(const Tensor& src, Tensor& dst) {
  const int dev = src.device().index;
  DeviceGuard guard(dev);
  Tensor packed = src;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
    packed = empty_workspace(src.shape(), dst.dtype(), src.device());
    copy_on_device(src, packed);
  }
  Tensor host = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dst.dtype(), Device::cpu());
  cudaStream_t stream = stream_for(dev);
  KILN_CUDA_CHECK(cudaMemcpyAsync(host.data_ptr(), packed.data_ptr(), packed.nbytes(), cudaMemcpyDeviceToHost, stream));
  synchronize_stream(dev);
  if (!dst.is_contiguous()) cpu().copy(host, dst);
}

// Between two devices: pack on the source, peer-copy, unpack on the target.
// Synchronous, because the source block must outlive the peer copy.
void copy_between_devices(const Tensor& src, Tensor& dst) {
  const int from = src.device().index, to = dst.device().index;
  Tensor packed = contiguous_or_copy(src);
  {
    DeviceGuard guard(from);
    synchronize_stream(from);
  }
  DeviceGuard guard(to);
  Tensor landed = empty_workspace(src.shape(), src.dtype(), dst.device());
  KILN_CUDA_CHECK(cudaMemcpyPeerAsync(landed.data_ptr(), to, packed.data_ptr(), from, packed.nbytes(), stream_for(to)));
  copy_on_device(landed, dst);
  synchronize_stream(to);
}

// The fill value as the bits of `dtype`, converted exactly as the CPU does.
uint64_t value_bits(double value, DType dtype) {
  uint64_t bits = 0;
  auto put = [&](auto v) { std::memcpy(&bits, &v, sizeof(v)); };
  switch (dtype) {
    case DType::f32:
      put(float(value));
      break;
    case DType::f64:
      put(value);
      break;
    case DType::bf16:
      put(float_to_bf16(float(value)));
      break;
    case DType::f16:
      put(float_to_f16(float(value)));
      break;
    case DType::i32:
      put(int32_t(value));
      break;
    case DType::i64:
      put(int64_t(value));
      break;
    case DType::u8:
      put(uint8_t(value));
      break;
  }
  return bits;
}

}  // namespace

void copy_on_device(const Tensor& src, Tensor& dst) {
  KILN_CHECK(src.shape() == dst.shape(), "copy: shapes differ (", shape_str(src.shape()), " vs ",
             shape_str(dst.shape()), ")");
  const int64_t n = dst.numel();
  if (n == 0) return;
  const int dev = dst.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  StridedLayout<2> layout = make_layout<2>(dst.shape(), {&dst.strides(), &src.strides()});
  const int grid = grid_for(n, kBlock, dev);
  if (src.dtype() == dst.dtype()) {
    dispatch_bits(dst.element_size(), [&]<typename Bits>() {
      copy_bits_kernel<Bits><<<grid, kBlock, 0, stream>>>(ptr<Bits>(dst), ptr<const Bits>(src), layout, n);
    });
  } else {
    dispatch_any(src.dtype(), [&]<typename S>() {
      dispatch_any(dst.dtype(), [&]<typename D>() {
        if constexpr (!std::is_same_v<S, D>)
          cast_kernel<S, D>
              <<<grid, kBlock, 0, stream>>>(ptr<D>(dst), ptr<const S>(src), layout, n, layout.contiguous());
      });
    });
  }
  KILN_CUDA_CHECK_LAUNCH();
}

Tensor contiguous_or_copy(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor c = empty_workspace(t.shape(), t.dtype(), t.device());
  copy_on_device(t, c);
  return c;
}

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  KILN_CHECK(src.defined() && dst.defined(), "copy: undefined tensor");
  KILN_CHECK(src.shape() == dst.shape(), "copy: source ", shape_str(src.shape()), " and destination ",
             shape_str(dst.shape()), " differ in shape");
  if (dst.numel() == 0) return;
  const bool src_cpu = src.device().is_cpu(), dst_cpu = dst.device().is_cpu();
  if (src_cpu && dst_cpu) return cpu().copy(src, dst);
  if (src_cpu) return copy_host_to_device(src, dst);
  if (dst_cpu) return copy_device_to_host(src, dst);
  if (src.device() != dst.device()) return copy_between_devices(src, dst);
  copy_on_device(src, dst);
}

void CudaBackend::fill(Tensor& dst, double value) {
  check_cuda(dst, "fill", "dst");
  const int64_t n = dst.numel();
  if (n == 0) return;
  const int dev = dst.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  const uint64_t bits = value_bits(value, dst.dtype());
  if (bits == 0 && dst.is_contiguous()) {
    KILN_CUDA_CHECK(cudaMemsetAsync(dst.data_ptr(), 0, dst.nbytes(), stream));
    return;
  }
  StridedLayout<1> layout = make_layout<1>(dst.shape(), {&dst.strides()});
  const int grid = grid_for(n, kBlock, dev);
  dispatch_bits(dst.element_size(), [&]<typename Bits>() {
    Bits v;
    std::memcpy(&v, &bits, sizeof(Bits));
    fill_kernel<Bits><<<grid, kBlock, 0, stream>>>(ptr<Bits>(dst), v, layout, n);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
