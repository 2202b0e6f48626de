// Every byte a tensor owns comes from a device's Allocator, which keeps exact
// current and peak counts, in total and per category. The memory planner
// trusts these numbers, so nothing allocates tensor memory any other way.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "kiln/core/device.h"

namespace kiln {

enum class MemoryCategory : uint8_t { other, weights, grads, optimizer, activations, workspace, count };
const char* memory_category_name(MemoryCategory c);

struct MemoryStats {
  size_t current = 0;   // bytes held by live tensors
  size_t peak = 0;      // high-water mark of current since the last reset
  size_t reserved = 0;  // bytes taken from the system (>= current for caching allocators)
  size_t allocations = 0;
  std::array<size_t, size_t(MemoryCategory::count)> current_by_category{};
  std::array<size_t, size_t(MemoryCategory::count)> peak_by_category{};
};

// While alive, new allocations on this thread are booked under `category`.
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory c);
  ~MemoryCategoryScope();
  static MemoryCategory current();

 private:
  MemoryCategory previous_;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  void* allocate(size_t bytes, MemoryCategory category);
  void deallocate(void* ptr, size_t bytes, MemoryCategory category);
  MemoryStats stats() const;
  void reset_peak();

 protected:
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_deallocate(void* ptr, size_t bytes) = 0;
  // Caching allocators override to report what they hold from the system.
  virtual size_t raw_reserved() const { return stats_.current; }

 private:
  mutable std::mutex mutex_;
  MemoryStats stats_;
};

// One allocator per device; backends register theirs at start-up.
using AllocatorFactory = Allocator* (*)(int device_index);
void register_allocator(DeviceType type, AllocatorFactory factory);
Allocator& allocator_for(Device device);  // throws if the device type has no backend
// Called by allocator_for when a device type has no allocator yet, so a
// backend that registers on first use (CUDA) can do so even when the first
// thing a program does is allocate a tensor there.
void register_allocator_initializer(DeviceType type, void (*init)());
bool has_allocator(DeviceType type);

}  // namespace kiln
