// Embedding lookup and its backward (scatter-add into the table).
//
//  forward   out[i, c] = weight[ids[i], c]; one thread per output element.
//  backward  dweight[v, c] += sum over {i : ids[i] == v} of dout[i, c]
//
// The backward is deterministic without atomics: (id, position) pairs are
// radix-sorted by id (cub, stable, so positions stay ascending within an id),
// then the first position of each run of equal ids owns that table row and
// sums the run's dout rows in order. A very frequent id (padding) makes one
// long run for one block; fine at the scales Kiln trains.
//
// ids are i32 or i64; an id outside [0, V) reads nothing, is recorded in the
// device's input-check slots and is thrown at the next synchronisation
// (cuda_util.h). weight/dweight may have any strides; dout and out are
// contiguous [..., C]. f32 compute for bf16/f16.
#include <cub/device/device_radix_sort.cuh>

#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void embedding_kernel(const T* weight, int64_t w_row, int64_t w_col, const void* ids, bool ids_i64, T* out,
                                 int64_t n, int64_t C, int64_t V, int* error_flag) {
  const int64_t total = n * C;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / C, c = e % C;
    const int64_t id = load_index(ids, ids_i64, i);
    if (id < 0 || id >= V) {
      if (c == 0) atomicCAS(error_flag, 0, int(i < (int64_t(1) << 30) ? i : (int64_t(1) << 30)) + 1);
      out[e] = from_acc<T>(0.0f);
      continue;
    }
    out[e] = weight[id * w_row + c * w_col];
  }
}

// Sort keys (int32 ids, range-checked) and values (positions 0..n-1).
__global__ void embedding_keys_kernel(const void* ids, bool ids_i64, int32_t* keys, int32_t* positions, int64_t n,
                                      int64_t V, int* error_flag) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = load_index(ids, ids_i64, i);
    const bool bad = id < 0 || id >= V;
    if (bad) atomicCAS(error_flag, 0, int(i < (int64_t(1) << 30) ? i : (int64_t(1) << 30)) + 1);
    keys[i] = bad ? 0 : int32_t(id);
    positions[i] = int32_t(i);
  }
}

// A block per sorted position p (grid-stride); only the first position of a
// run of equal ids does work.
template <typename T>
__global__ void embedding_backward_kernel(const int32_t* keys, const int32_t* positions, const T* dout, T* dweight,
                                          int64_t dw_row, int64_t dw_col, int64_t n, int64_t C) {
  using A = Acc<T>;
  for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
    const int32_t v = keys[p];
    if (p > 0 && keys[p - 1] == v) continue;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      A acc = 0;
      for (int64_t q = p; q < n && keys[q] == v; ++q) acc += to_acc(dout[int64_t(positions[q]) * C + c]);
      T* dst = dweight + v * dw_row + c * dw_col;
      *dst = from_acc<T>(to_acc(*dst) + acc);
    }
  }
}

void check_ids(const Tensor& ids, const Tensor& like, const char* op) {
  check_cuda(ids, op, "ids");
  check_same_device(ids, like, op);
  KILN_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, op, ": ids must be i32 or i64, got ",
             dtype_name(ids.dtype()));
}

int bits_for(int64_t V) {
  int bits = 1;
  while (bits < 31 && (int64_t(1) << bits) < V) ++bits;
  return bits;
}

}  // namespace

void CudaBackend::embedding(const Tensor& weight, const Tensor& ids_in, Tensor& out) {
  const char* op = "embedding";
  check_cuda(weight, op, "weight");
  check_ids(ids_in, weight, op);
  check_cuda(out, op, "out");
  check_same_device(out, weight, op);
  KILN_CHECK(weight.dim() == 2, "embedding: weight must be [V, C], got ", shape_str(weight.shape()));
  const int64_t V = weight.size(0), C = weight.size(1);
  Shape expected = ids_in.shape();
  expected.push_back(C);
  check_shape(out, expected, op, "out");
  check_dtype(out, weight.dtype(), op, "out");
  check_contiguous(out, op, "out");
  const int64_t n = ids_in.numel();
  if (n == 0 || C == 0) return;
  KILN_CHECK(V < (int64_t(1) << 31), "embedding: tables with 2^31 rows or more are not supported");
  Tensor ids = contiguous_or_copy(ids_in);
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  int* flag = input_check_slot(dev, InputCheck::embedding, [V](int64_t i) {
    return ::kiln::detail::concat("embedding: ids[", i, "] (flat index) is outside [0, ", V, ")");
  });
  dispatch_floating(weight.dtype(), op, [&]<typename T>() {
    embedding_kernel<T><<<grid_for(n * C, 256, dev), 256, 0, stream>>>(
        ptr<const T>(weight), weight.stride(0), weight.stride(1), ids.data_ptr(), ids.dtype() == DType::i64,
        ptr<T>(out), n, C, V, flag);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void CudaBackend::embedding_backward(const Tensor& dout_in, const Tensor& ids_in, Tensor& dweight) {
  const char* op = "embedding_backward";
  check_cuda(dweight, op, "dweight");
  check_ids(ids_in, dweight, op);
  check_cuda(dout_in, op, "dout");
  check_same_device(dout_in, dweight, op);
  KILN_CHECK(dweight.dim() == 2, "embedding_backward: dweight must be [V, C], got ", shape_str(dweight.shape()));
  const int64_t V = dweight.size(0), C = dweight.size(1);
  Shape expected = ids_in.shape();
  expected.push_back(C);
  check_shape(dout_in, expected, op, "dout");
  check_dtype(dout_in, dweight.dtype(), op, "dout");
  const int64_t n = ids_in.numel();
  if (n == 0 || C == 0) return;
  KILN_CHECK(n < (int64_t(1) << 31) && V < (int64_t(1) << 31), "embedding_backward: more than 2^31 ids or rows");
  Tensor ids = contiguous_or_copy(ids_in);
  Tensor dout = contiguous_or_copy(dout_in);
  const int dev = dweight.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  int* flag = input_check_slot(dev, InputCheck::embedding_backward, [V](int64_t i) {
    return ::kiln::detail::concat("embedding_backward: ids[", i, "] (flat index) is outside [0, ", V, ")");
  });
  // keys_in, positions_in, keys_out, positions_out
  Tensor pairs = empty_workspace({4, n}, DType::i32, dweight.device());
  int32_t* keys_in = ptr<int32_t>(pairs);
  int32_t* pos_in = keys_in + n;
  int32_t* keys_out = keys_in + 2 * n;
  int32_t* pos_out = keys_in + 3 * n;
  embedding_keys_kernel<<<grid_for(n, 256, dev), 256, 0, stream>>>(ids.data_ptr(), ids.dtype() == DType::i64, keys_in,
                                                                   pos_in, n, V, flag);
  KILN_CUDA_CHECK_LAUNCH();

  const int end_bit = bits_for(V);
  size_t temp_bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, pos_in, pos_out, int(n), 0,
                                                  end_bit, stream));
  Tensor temp = empty_workspace({int64_t(std::max<size_t>(temp_bytes, 1))}, DType::u8, dweight.device());
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                  int(n), 0, end_bit, stream));
  const unsigned grid = unsigned(std::min<int64_t>(n, int64_t(device_state(dev).sm_count) * 16));
  const int block = C >= 256 ? 256 : (C >= 64 ? 128 : 32);
  dispatch_floating(dweight.dtype(), op, [&]<typename T>() {
    embedding_backward_kernel<T><<<grid, block, 0, stream>>>(keys_out, pos_out, ptr<const T>(dout), ptr<T>(dweight),
                                                             dweight.stride(0), dweight.stride(1), n, C);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
