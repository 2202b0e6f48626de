// Attention over a paged KV cache (backend.h) and the row scatter that fills
// the pages; the CPU's kiln/cpu/paged_attention.cpp is the reference.
//
//  paged_attention_kernel  a block per (query row, query head): the scores
//                          of the row's span in shared memory, then a block
//                          max and sum, then each thread owns dims of the
//                          output and sums the values over positions in
//                          order. Launch geometry is fixed, so a row's bits
//                          never depend on the other rows.
//  index_copy_rows_kernel  one thread per element.
//
// A span or page outside the pool sets the device error flag (the launcher
// throws after reading it back) instead of reading outside the pool.
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 128;

// Rounds to the cache's dtype where PyTorch's eager attention rounds (as the CPU does).
template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_acc(from_acc<T>(x));
}

template <typename T>
__global__ void paged_attention_kernel(const T* q, const T* k, const T* v, const int32_t* tables, const int32_t* spans,
                                       T* out, float scale, int64_t heads, int64_t kv_heads, int64_t D, int64_t pages,
                                       int64_t page_size, int64_t sequences, int64_t max_pages, int* error_flag) {
  extern __shared__ float scores[];
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
  auto row_of = [&](const T* pool, int64_t pos) {
    return pool + ((int64_t(table[pos / page_size]) * page_size + pos % page_size) * kv_heads + g) * D;
  };
  const T* qh = q + (r * heads + h) * D;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const T* key = row_of(k, lo + i);
    float dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += to_acc(qh[d]) * to_acc(key[d]);
    scores[i] = round_to<T>(round_to<T>(dot) * scale);
    m = fmaxf(m, scores[i]);
  }
  m = block_max(m, scratch);
  float total = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) total += scores[i] = expf(scores[i] - m);
  total = block_sum(total, scratch);  // also orders the score writes before the reads below
  const float inverse = 1.0f / total;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) scores[i] = round_to<T>(scores[i] * inverse);
  __syncthreads();
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += scores[i] * to_acc(row_of(v, lo + i)[d]);
    o[d] = from_acc<T>(acc);
  }
}

__global__ void index_copy_rows_kernel(const char* src, const int32_t* index, char* dst, int64_t rows,
                                       int64_t row_bytes, int64_t dst_rows, int* error_flag) {
  const int64_t total = rows * row_bytes;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / row_bytes, b = e % row_bytes, to = index[r];
    if (to < 0 || to >= dst_rows) {
      atomicCAS(error_flag, 0, 1);
      continue;
    }
    dst[to * row_bytes + b] = src[e];
  }
}

}  // namespace

void CudaBackend::paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const Tensor& tables,
                                  const Tensor& spans, Tensor& out, float scale) {
  const char* op = "paged_attention";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k_pages, &v_pages, &tables, &spans, &out}) {
    check_cuda(*t, op, "operand");
    check_same_device(*t, q, op);
    check_contiguous(*t, op, "operand");
  }
  KILN_CHECK(q.dim() == 3 && k_pages.dim() == 4 && k_pages.shape() == v_pages.shape() && out.shape() == q.shape() &&
                 k_pages.size(3) == q.size(2) && k_pages.size(2) > 0 && q.size(1) % k_pages.size(2) == 0,
             op, ": q and out must be [R, H, D] and the pages [N, P, Hkv, D] with H a multiple of Hkv");
  KILN_CHECK(k_pages.dtype() == q.dtype() && v_pages.dtype() == q.dtype() && out.dtype() == q.dtype(), op,
             ": q, the pages and out must share one dtype");
  KILN_CHECK(tables.dtype() == DType::i32 && tables.dim() == 2 && spans.dtype() == DType::i32 && spans.dim() == 2 &&
                 spans.size(1) == 3 && spans.size(0) == q.size(0),
             op, ": tables must be i32 [S, pages] and spans i32 [R, 3]");
  const int64_t rows = q.size(0), heads = q.size(1);
  if (rows == 0) return;
  // The scores of the longest span a table allows sit in shared memory.
  const size_t shared = size_t(tables.size(1) * k_pages.size(1)) * sizeof(float);
  const int dev = q.device().index;
  DeviceGuard guard(dev);
  KILN_CHECK(shared <= size_t(device_state(dev).max_smem_optin), op, ": spans of ",
             tables.size(1) * k_pages.size(1), " positions do not fit the GPU's shared memory");
  cudaStream_t stream = stream_for(dev);
  clear_error_flag(dev);
  dispatch_floating(q.dtype(), op, [&]<typename T>() {
    if (shared > 48 * 1024)
      KILN_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(shared)));
    paged_attention_kernel<T><<<unsigned(rows * heads), kThreads, shared, stream>>>(
        ptr<const T>(q), ptr<const T>(k_pages), ptr<const T>(v_pages), ptr<const int32_t>(tables),
        ptr<const int32_t>(spans), ptr<T>(out), scale, heads, k_pages.size(2), q.size(2), k_pages.size(0),
        k_pages.size(1), tables.size(0), tables.size(1), device_state(dev).error_flag);
  });
  KILN_CUDA_CHECK_LAUNCH();
  KILN_CHECK(read_error_flag(dev) == 0, op, ": a span or page lies outside the pool");
}

void CudaBackend::index_copy_rows(const Tensor& src, const Tensor& index, Tensor& dst) {
  const char* op = "index_copy_rows";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&src, &index, &dst}) {
    check_cuda(*t, op, "operand");
    check_same_device(*t, src, op);
    check_contiguous(*t, op, "operand");
  }
  KILN_CHECK(index.dtype() == DType::i32 && index.dim() == 1 && src.dim() >= 1 && src.size(0) == index.size(0) &&
                 dst.dim() >= 1 && src.dtype() == dst.dtype(),
             op, ": src [R, ...] and index i32 [R] must agree, and src and dst share a dtype");
  const int64_t rows = src.size(0), dst_rows = dst.size(0);
  if (rows == 0) return;
  const int64_t row_bytes = int64_t(src.numel() / rows * dtype_size(src.dtype()));
  KILN_CHECK(dst_rows > 0 && int64_t(dst.numel() / dst_rows * dtype_size(dst.dtype())) == row_bytes, op,
             ": src and dst rows differ in size");
  const int dev = src.device().index;
  DeviceGuard guard(dev);
  clear_error_flag(dev);
  index_copy_rows_kernel<<<unsigned(grid_for(rows * row_bytes, 256, dev)), 256, 0, stream_for(dev)>>>(
      ptr<const char>(src), ptr<const int32_t>(index), ptr<char>(dst), rows, row_bytes, dst_rows,
      device_state(dev).error_flag);
  KILN_CUDA_CHECK_LAUNCH();
  KILN_CHECK(read_error_flag(dev) == 0, op, ": an index lies outside [0, ", dst_rows, ")");
}

}  // namespace kiln::cuda
