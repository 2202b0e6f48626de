// The caching device allocator: one per device.
//
// cudaMalloc/cudaFree synchronise the device and cost tens of microseconds, so
// freed blocks go to a free list per size class and the next request of that
// class reuses one. Reuse needs no event: every kernel on a device runs on its
// one compute stream, so work enqueued later cannot overtake the last use of
// a freed block. When cudaMalloc fails, the cache is returned to the driver
// and the request retried once before failing with an error that says how
// much was asked for and how much is in use and reserved.
//
// Size classes: multiples of 512 B up to 1 MiB, then four classes per power
// of two (at most 25% rounding waste).
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"

namespace kiln::cuda {
namespace {

size_t size_class(size_t bytes) {
  constexpr size_t kSmall = size_t(1) << 20;
  if (bytes <= kSmall) return (bytes + 511) / 512 * 512;
  size_t top = size_t(1) << (63 - __builtin_clzll(bytes));  // largest power of two <= bytes
  size_t step = top / 4;
  return (bytes + step - 1) / step * step;
}

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  std::string device_name() const override { return "cuda:" + std::to_string(device_); }

  // Returns every cached (unused) block to the driver.
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    empty_cache_locked();
  }

 protected:
  void* raw_allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    size_t cls = size_class(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      live_[p] = cls;
      in_use_ += cls;
      return p;
    }
    DeviceGuard guard(device_);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, cls);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      empty_cache_locked();
      e = cudaMalloc(&p, cls);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      // Allocator::allocate adds the usage by category and how to make it fit.
      throw OutOfMemoryError(detail::concat(cudaGetErrorString(e), "; Kiln holds ", mib(reserved_),
                                            " from the driver, which has ", mib(free_bytes), " free of ",
                                            mib(total_bytes)));
    }
    reserved_ += cls;
    live_[p] = cls;
    in_use_ += cls;
    return p;
  }

  // Must not throw: it runs from tensor destructors, also at process exit.
  void raw_deallocate(void* ptr, size_t) override {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours: never free what we did not allocate
    size_t cls = it->second;
    live_.erase(it);
    in_use_ -= cls;
    free_[cls].push_back(ptr);
  }

  size_t raw_reserved() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return reserved_;
  }

 private:
  void empty_cache_locked() {
    if (free_.empty()) return;
    DeviceGuard guard(device_);
    for (auto& [cls, blocks] : free_) {
      for (void* p : blocks) {
        cudaFree(p);  // synchronises the device, so no kernel still uses p
        reserved_ -= cls;
      }
    }
    free_.clear();
  }

  int device_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> live_;
  size_t in_use_ = 0;    // size-class bytes held by live blocks
  size_t reserved_ = 0;  // bytes obtained from cudaMalloc and not yet returned
};

std::mutex g_mutex;
CachingAllocator* g_allocators[64] = {};

}  // namespace

Allocator* caching_allocator_for(int device_index) {
  KILN_CHECK(device_index >= 0 && device_index < 64, "cuda device index ", device_index, " is out of range");
  std::lock_guard<std::mutex> lock(g_mutex);
  // Never destroyed: tensors in static objects may be freed after main returns.
  if (!g_allocators[device_index]) g_allocators[device_index] = new CachingAllocator(device_index);
  return g_allocators[device_index];
}

}  // namespace kiln::cuda
