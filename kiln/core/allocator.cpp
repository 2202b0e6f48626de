#include "kiln/core/allocator.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <map>
#include <new>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/units.h"

namespace kiln {

const char* memory_category_name(MemoryCategory c) {
  static const char* names[] = {"other", "weights", "grads", "optimizer", "activations", "workspace"};
  return names[size_t(c)];
}

namespace {
thread_local MemoryCategory t_category = MemoryCategory::other;
}

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory c) : previous_(t_category) { t_category = c; }
MemoryCategoryScope::~MemoryCategoryScope() { t_category = previous_; }
MemoryCategory MemoryCategoryScope::current() { return t_category; }

std::string Allocator::out_of_memory_message(size_t bytes, MemoryCategory category, const std::string& why) const {
  std::string usage;
  for (size_t c = 0; c < size_t(MemoryCategory::count); ++c)
    if (stats_.current_by_category[c] > 0)
      usage += std::string(usage.empty() ? "" : ", ") + memory_category_name(MemoryCategory(c)) + " " +
               format_bytes(double(stats_.current_by_category[c]));
  return detail::concat("out of memory on ", device_name(), ": allocating ", format_bytes(double(bytes)), " of ",
                        memory_category_name(category), " failed: ", why, ". In use: ",
                        usage.empty() ? "nothing" : usage, " (", format_bytes(double(stats_.current)), " in all; peak ",
                        format_bytes(double(stats_.peak)),
                        "). To make it fit: `kiln plan` with this run's recipe and options predicts what fits, and "
                        "`kiln train ... --fit` applies it (activation checkpointing, --micro-batch, --offload, "
                        "bf16); or lower --batch-size.");
}

void Allocator::set_budget(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  budget_ = bytes;
}

size_t Allocator::budget() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return budget_;
}

void* Allocator::allocate(size_t bytes, MemoryCategory category) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (budget_ > 0 && stats_.current + bytes > budget_)
      throw OutOfMemoryError(out_of_memory_message(
          bytes, category, "that would make " + format_bytes(double(stats_.current + bytes)) + ", over the budget of " +
                               format_bytes(double(budget_)) + " (--memory-budget)"));
  }
  void* p = nullptr;
  try {
    p = raw_allocate(bytes);
  } catch (const OutOfMemoryError& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    throw OutOfMemoryError(out_of_memory_message(bytes, category, e.what()));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.current += bytes;
  stats_.peak = std::max(stats_.peak, stats_.current);
  stats_.allocations += 1;
  size_t c = size_t(category);
  stats_.current_by_category[c] += bytes;
  stats_.peak_by_category[c] = std::max(stats_.peak_by_category[c], stats_.current_by_category[c]);
  return p;
}

void Allocator::deallocate(void* ptr, size_t bytes, MemoryCategory category) {
  raw_deallocate(ptr, bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.current -= bytes;
  stats_.current_by_category[size_t(category)] -= bytes;
}

MemoryStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats s = stats_;
  s.reserved = raw_reserved();
  return s;
}

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak = stats_.current;
  stats_.peak_by_category = stats_.current_by_category;
}

namespace {

// 64-byte aligned so SIMD loops and BLAS see aligned rows. Freed blocks are
// kept for reuse (up to 1 GiB): a training step frees and reallocates the
// same sizes every step, and fresh large blocks come from mmap, so every page
// would fault again (that was most of the gap between kiln::matmul and a raw
// GEMM on large outputs); a decoding step makes the same small outputs every
// token, which then cost no call to the system's allocator.
//
// Blocks past 64 KiB are kept by size class, eight a doubling (at most an
// eighth more than asked): prompts of other lengths, and a mixture's experts,
// each given a different number of a prompt's tokens, ask for sizes that
// differ a little every time, and by exact size each was a fresh mmap whose
// pages all faulted. A large request with no block of its class takes the
// smallest cached one up to twice its size (the block says its size in a
// header): batches that shrink one after another (texts embedded longest
// first) otherwise asked for a new class every batch, and faulted in every
// page of each (298,000 faults, 1.2 GB resident, embedding 512 short texts
// with MiniLM).
constexpr size_t kExactBytes = size_t(64) << 10;
size_t block_size(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  if (rounded <= kExactBytes) return rounded;
  const size_t step = std::bit_floor(rounded) / 8;
  return (rounded + step - 1) / step * step;
}

class CpuAllocator final : public Allocator {
 public:
  explicit CpuAllocator(int index) : index_(index) {}
  // cpu:N with N >= 1 is a simulated device: host memory with its own
  // allocator (own counts, own budget), so budgets and offload can be
  // tested without a GPU.
  std::string device_name() const override { return index_ == 0 ? "cpu" : "cpu:" + std::to_string(index_); }

 protected:
  void* raw_allocate(size_t bytes) override {
    const size_t rounded = block_size(bytes);
    const bool large = rounded > kExactBytes;
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      // A cached block of this class; for a large request, else the smallest up to twice its size.
      for (auto it = cache_.lower_bound(rounded); it != cache_.end() && it->first <= (large ? 2 : 1) * rounded; ++it) {
        if (it->second.empty()) continue;  // (lists stay when emptied: a warm step then allocates no map node)
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= it->first;
        live_bytes_ += it->first;
        return p;
      }
    }
    char* base = static_cast<char*>(std::aligned_alloc(64, large ? rounded + kHeader : rounded));
    if (!base) throw OutOfMemoryError("the host has no more memory to give (aligned_alloc failed)");
    if (large) *reinterpret_cast<size_t*>(base) = rounded;
    std::lock_guard<std::mutex> lock(cache_mutex_);
    live_bytes_ += rounded;
    return large ? base + kHeader : base;
  }
  void raw_deallocate(void* ptr, size_t bytes) override {
    size_t size = block_size(bytes);
    char* base = static_cast<char*>(ptr);
    if (size > kExactBytes) {  // a large block says its own size: a smaller request may have held it
      base -= kHeader;
      size = *reinterpret_cast<const size_t*>(base);
    }
    std::lock_guard<std::mutex> lock(cache_mutex_);
    live_bytes_ -= size;
    if (cached_bytes_ + size <= kMaxCached) {
      cache_[size].push_back(ptr);
      cached_bytes_ += size;
      return;
    }
    std::free(base);
  }
  size_t raw_reserved() const override {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    return live_bytes_ + cached_bytes_;  // what this allocator holds from the system
  }

 private:
  static constexpr size_t kMaxCached = size_t(1) << 30;
  int index_;
  mutable std::mutex cache_mutex_;
  // A large block's size in the 64 bytes before it (kept 64-byte aligned).
  static constexpr size_t kHeader = 64;
  std::map<size_t, std::vector<void*>> cache_;  // by block size
  size_t cached_bytes_ = 0, live_bytes_ = 0;
};

Allocator* cpu_allocator_factory(int index) {
  // Never destroyed: tensors in other static objects may be freed after them.
  static std::mutex mutex;
  static std::map<int, CpuAllocator*> allocators;
  std::lock_guard<std::mutex> lock(mutex);
  CpuAllocator*& a = allocators[index];
  if (!a) a = new CpuAllocator(index);
  return a;
}

AllocatorFactory g_factories[3] = {&cpu_allocator_factory, nullptr, nullptr};
void (*g_initializers[3])() = {nullptr, nullptr, nullptr};

}  // namespace

void register_allocator(DeviceType type, AllocatorFactory factory) { g_factories[size_t(type)] = factory; }

bool has_allocator(DeviceType type) { return g_factories[size_t(type)] != nullptr; }

void register_allocator_initializer(DeviceType type, void (*init)()) { g_initializers[size_t(type)] = init; }

Allocator& allocator_for(Device device) {
  if (!g_factories[size_t(device.type)] && g_initializers[size_t(device.type)]) g_initializers[size_t(device.type)]();
  AllocatorFactory f = g_factories[size_t(device.type)];
  KILN_CHECK(f, "no backend for device ", device.str(),
             ": this build of Kiln has no CUDA support, or no CUDA device was found. Use --device cpu.");
  return *f(device.index);
}

}  // namespace kiln
