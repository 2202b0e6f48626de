#include "kiln/core/allocator.h"

#include <cstdlib>
#include <new>

#include "kiln/core/error.h"

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

void* Allocator::allocate(size_t bytes, MemoryCategory category) {
  void* p = raw_allocate(bytes);
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

// 64-byte aligned so SIMD loops and BLAS see aligned rows.
class CpuAllocator final : public Allocator {
 protected:
  void* raw_allocate(size_t bytes) override {
    size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) KILN_FAIL("out of host memory: could not allocate ", bytes, " bytes");
    return p;
  }
  void raw_deallocate(void* ptr, size_t) override { std::free(ptr); }
};

Allocator* cpu_allocator_factory(int) {
  static CpuAllocator allocator;
  return &allocator;
}

AllocatorFactory g_factories[2] = {&cpu_allocator_factory, nullptr};
void (*g_initializers[2])() = {nullptr, nullptr};

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
