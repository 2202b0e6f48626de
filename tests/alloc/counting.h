// The allocation counter of kiln_alloc_tests (tests/alloc/main.cpp).
#pragma once
#include <atomic>
#include <cstdint>

namespace kiln_test {
extern std::atomic<bool> counting;
extern std::atomic<int64_t> allocations;

// Heap allocations (malloc, calloc, realloc and the aligned ones, from any
// thread) made while `work` runs.
template <typename Work>
int64_t allocations_during(Work&& work) {
  allocations = 0;
  counting = true;
  work();
  counting = false;
  return allocations.load();
}
}  // namespace kiln_test
