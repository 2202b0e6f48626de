// Pinned staging for host-to-device copies.
//
// cudaMemcpyAsync from pageable memory first waits for all earlier work on
// the stream, so every upload (a batch of token ids, an optimizer's argument
// table) would stall the CPU behind the GPU. Copying into pinned memory and
// enqueueing the DMA from there keeps the stream running and lets the caller
// reuse its buffer at once. A block is reused once the event recorded after
// its copy has completed.
#include <mutex>
#include <vector>

#include "kiln/cuda/cuda_util.h"

namespace kiln::cuda {
namespace {

constexpr size_t kMinBlock = size_t(64) << 10;
constexpr size_t kMaxBlock = size_t(32) << 20;    // larger uploads go in chunks
constexpr size_t kPoolLimit = size_t(256) << 20;  // pinned bytes kept per device

struct StagingBlock {
  void* host = nullptr;
  size_t bytes = 0;
  cudaEvent_t done = nullptr;
};

struct StagingPool {
  std::mutex mutex;
  std::vector<StagingBlock> blocks;
  size_t total = 0;
};

StagingPool g_pools[64];

bool is_free(const StagingBlock& b) {
  cudaError_t e = cudaEventQuery(b.done);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it
    return false;
  }
  KILN_CUDA_CHECK(e);
  return true;
}

// Returns a block of at least `bytes` whose previous copy has finished.
StagingBlock& acquire(StagingPool& pool, size_t bytes, cudaStream_t stream) {
  for (StagingBlock& b : pool.blocks)
    if (b.bytes >= bytes && is_free(b)) return b;
  if (pool.total + bytes > kPoolLimit && !pool.blocks.empty()) {
    // Over budget: wait for the stream, then drop blocks too small to reuse.
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (StagingBlock& b : pool.blocks)
      if (b.bytes >= bytes) return b;
    for (StagingBlock& b : pool.blocks) {
      cudaFreeHost(b.host);
      cudaEventDestroy(b.done);
    }
    pool.blocks.clear();
    pool.total = 0;
  }
  size_t size = kMinBlock;
  while (size < bytes) size *= 2;
  StagingBlock b;
  b.bytes = size;
  KILN_CUDA_CHECK(cudaHostAlloc(&b.host, size, cudaHostAllocDefault));
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming));
  pool.blocks.push_back(b);
  pool.total += size;
  return pool.blocks.back();
}

}  // namespace

void upload_async(const void* host, void* device_ptr, size_t bytes, int device) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_for(device);
  StagingPool& pool = g_pools[device];
  std::lock_guard<std::mutex> lock(pool.mutex);
  const char* src = static_cast<const char*>(host);
  char* dst = static_cast<char*>(device_ptr);
  for (size_t done = 0; done < bytes;) {
    size_t n = std::min(bytes - done, kMaxBlock);
    StagingBlock& b = acquire(pool, n, stream);
    std::memcpy(b.host, src + done, n);
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst + done, b.host, n, cudaMemcpyHostToDevice, stream));
    KILN_CUDA_CHECK(cudaEventRecord(b.done, stream));
    done += n;
  }
}

}  // namespace kiln::cuda
