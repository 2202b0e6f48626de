// Attention over a paged KV cache (backend.h) and the row scatter that fills
// the pages; the CPU's kiln/cpu/paged_attention.cpp is the reference.
//
//  paged_attention_kernel  a block per (query row, query head): the scores
//                          of the row's span in shared memory, then a block
//                          max and sum, then each thread owns dims of the
//                          output and sums the values over positions in
//                          order. Launch geometry is fixed, so a row's bits
//                          never depend on the other rows.
//  scatter_rows_kernel     one thread per element.
//
// A span or page outside the pool is recorded in the device's input-check
// slots (thrown at the next synchronisation, cuda_util.h) instead of read.
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 128;

template <typename T>
__global__ void paged_attention_kernel(const T* q, const T* k, const T* v, const int32_t* tables, const int32_t* spans,
                                       T* out, float scale, float softcap, int64_t heads, int64_t kv_heads, int64_t D, int64_t pages,
                                       int64_t page_size, int64_t sequences, int64_t max_pages, int* error_flag) {
  extern __shared__ float scores[];  // rounded to T where PyTorch's eager attention rounds (as the CPU does)
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x / heads, h = blockIdx.x % heads, g = h / (heads / kv_heads);
  const int64_t seq = spans[3 * r], lo = spans[3 * r + 1], hi = spans[3 * r + 2], n = hi - lo;
  T* o = out + (r * heads + h) * D;
  const bool bad_span = seq < 0 || seq >= sequences || lo < 0 || lo > hi || hi > max_pages * page_size;
  bool bad_page = false;
  if (!bad_span)
    for (int64_t p = lo / page_size; p * page_size < hi; ++p) {
      const int32_t page = tables[seq * max_pages + p];
      bad_page |= page < 0 || page >= pages;
    }
  if (bad_span || bad_page) {
    if (threadIdx.x == 0) atomicCAS(error_flag, 0, 1);
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) o[d] = from_acc<T>(0.0f);
    return;
  }
  const int32_t* table = tables + seq * max_pages;
  // Keys [N, Hkv, D, P]: element d of position pos; values [N, Hkv, P, D]: its row.
  auto key_at = [&](int64_t pos, int64_t d) {
    return k[((int64_t(table[pos / page_size]) * kv_heads + g) * D + d) * page_size + pos % page_size];
  };
  auto value_row = [&](int64_t pos) {
    return v + ((int64_t(table[pos / page_size]) * kv_heads + g) * page_size + pos % page_size) * D;
  };
  const T* qh = q + (r * heads + h) * D;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += to_acc(qh[d]) * to_acc(key_at(lo + i, d));
    scores[i] = rounded<T>(rounded<T>(dot) * scale);
    if (softcap > 0) scores[i] = rounded<T>(rounded<T>(tanhf(rounded<T>(scores[i] / softcap))) * softcap);
    m = fmaxf(m, scores[i]);
  }
  m = block_max(m, scratch);
  float total = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) total += scores[i] = expf(scores[i] - m);
  total = block_sum(total, scratch);  // also orders the score writes before the reads below
  const float inverse = 1.0f / total;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) scores[i] = rounded<T>(scores[i] * inverse);
  __syncthreads();
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += scores[i] * to_acc(value_row(lo + i)[d]);
    o[d] = from_acc<T>(acc);
  }
}

template <typename T>
__global__ void scatter_rows_kernel(const T* src, const int64_t* offsets, T* dst, int64_t rows, int64_t cols,
                                    int64_t stride, int64_t dst_elements, int* error_flag) {
  const int64_t total = rows * cols;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols, to = offsets[r] + c * stride;
    if (offsets[r] < 0 || to >= dst_elements) {
      atomicCAS(error_flag, 0, 1);
      continue;
    }
    dst[to] = src[e];
  }
}

}  // namespace

void CudaBackend::paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const Tensor& tables,
                                  const Tensor& spans, Tensor& out, float scale, float softcap) {
  const char* op = "paged_attention";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k_pages, &v_pages, &tables, &spans, &out}) {
    check_cuda(*t, op, "operand");
    check_same_device(*t, q, op);
    check_contiguous(*t, op, "operand");
  }
  KILN_CHECK(q.dim() == 3 && k_pages.dim() == 4 && v_pages.dim() == 4 && out.shape() == q.shape() &&
                 k_pages.shape() == (Shape{v_pages.size(0), v_pages.size(1), v_pages.size(3), v_pages.size(2)}) &&
                 v_pages.size(3) == q.size(2) && v_pages.size(1) > 0 && q.size(1) % v_pages.size(1) == 0,
             op, ": q and out must be [R, H, D], the keys [N, Hkv, D, P] and the values [N, Hkv, P, D], with H a "
             "multiple of Hkv");
  KILN_CHECK(k_pages.dtype() == q.dtype() && v_pages.dtype() == q.dtype() && out.dtype() == q.dtype(), op,
             ": q, the pages and out must share one dtype");
  KILN_CHECK(tables.dtype() == DType::i32 && tables.dim() == 2 && spans.dtype() == DType::i32 && spans.dim() == 2 &&
                 spans.size(1) == 3 && spans.size(0) == q.size(0),
             op, ": tables must be i32 [S, pages] and spans i32 [R, 3]");
  const int64_t rows = q.size(0), heads = q.size(1);
  if (rows == 0) return;
  // The scores of the longest span a table allows sit in shared memory.
  const size_t shared = size_t(tables.size(1) * v_pages.size(2)) * sizeof(float);
  const int dev = q.device().index;
  DeviceGuard guard(dev);
  KILN_CHECK(shared <= size_t(device_state(dev).max_smem_optin), op, ": spans of ",
             tables.size(1) * v_pages.size(2), " positions do not fit the GPU's shared memory");
  cudaStream_t stream = stream_for(dev);
  int* flag = input_check_slot(dev, InputCheck::paged_attention, [](int64_t) {
    return std::string("paged_attention: a span or page lies outside the pool");
  });
  dispatch_floating(q.dtype(), op, [&]<typename T>() {
    if (shared > 48 * 1024)
      KILN_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(shared)));
    paged_attention_kernel<T><<<unsigned(rows * heads), kThreads, shared, stream>>>(
        ptr<const T>(q), ptr<const T>(k_pages), ptr<const T>(v_pages), ptr<const int32_t>(tables),
        ptr<const int32_t>(spans), ptr<T>(out), scale, softcap, heads, v_pages.size(1), q.size(2), v_pages.size(0),
        v_pages.size(2), tables.size(0), tables.size(1), flag);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void CudaBackend::scatter_rows(const Tensor& src, const Tensor& offsets, int64_t column_stride, Tensor& dst) {
  const char* op = "scatter_rows";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&src, &offsets, &dst}) {
    check_cuda(*t, op, "operand");
    check_same_device(*t, src, op);
    check_contiguous(*t, op, "operand");
  }
  KILN_CHECK(offsets.dtype() == DType::i64 && offsets.dim() == 1 && src.dim() == 2 && src.size(0) == offsets.size(0) &&
                 src.dtype() == dst.dtype() && column_stride >= 1,
             op, ": src [R, C], offsets i64 [R] and a column stride >= 1, src and dst in one dtype");
  const int64_t rows = src.size(0), cols = src.size(1);
  if (rows * cols == 0) return;
  const int dev = src.device().index;
  DeviceGuard guard(dev);
  int* flag = input_check_slot(dev, InputCheck::scatter_rows, [n = dst.numel()](int64_t) {
    return ::kiln::detail::concat("scatter_rows: a row runs outside dst's ", n, " elements");
  });
  const unsigned grid = unsigned(grid_for(rows * cols, 256, dev));
  const auto launch = [&]<typename T>() {
    scatter_rows_kernel<T><<<grid, 256, 0, stream_for(dev)>>>(ptr<const T>(src), ptr<const int64_t>(offsets),
                                                             ptr<T>(dst), rows, cols, column_stride, dst.numel(), flag);
  };
  // Elements move as raw bits of their size.
  switch (dtype_size(src.dtype())) {
    case 2: launch.template operator()<uint16_t>(); break;
    case 4: launch.template operator()<uint32_t>(); break;
    case 8: launch.template operator()<uint64_t>(); break;
    default: launch.template operator()<uint8_t>(); break;
  }
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
