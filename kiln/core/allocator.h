// Every byte a tensor owns comes from a device's Allocator, which keeps exact
// current and peak counts, in total and per category. The memory planner
// trusts these numbers, so nothing allocates tensor memory any other way.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

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
  // Throws OutOfMemoryError when the device (or its budget) cannot hold
  // `bytes` more; the message names the category and the usage by category.
  void* allocate(size_t bytes, MemoryCategory category);
  void deallocate(void* ptr, size_t bytes, MemoryCategory category);
  MemoryStats stats() const;
  void reset_peak();
  // Caps the bytes live tensors may hold on this device (0: no cap). The cap
  // applies to the same exact counts stats() reports, so an allocation past
  // it fails exactly where a device of that size would run out (before any
  // caching or fragmentation, which a real device adds on top).
  void set_budget(size_t bytes);
  size_t budget() const;
  virtual std::string device_name() const = 0;

 protected:
  // Throws OutOfMemoryError (with the device's own detail) when the memory
  // is not there.
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_deallocate(void* ptr, size_t bytes) = 0;
  // Caching allocators override to report what they hold from the system.
  virtual size_t raw_reserved() const { return stats_.current; }

 private:
  std::string out_of_memory_message(size_t bytes, MemoryCategory category, const std::string& why) const;
  mutable std::mutex mutex_;
  MemoryStats stats_;
  size_t budget_ = 0;
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
