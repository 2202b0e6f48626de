// kiln_alloc_tests: the one test binary that counts heap allocations. It
// puts its own malloc family in front of glibc's (the program's own symbols
// come first for every library it loads, C++'s operator new included) and
// counts the calls while `kiln_test::counting` is set. Kept apart from
// kiln_tests so that no other test runs through these functions.
#include <gtest/gtest.h>

#include <execinfo.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kiln/cpu/runtime_defaults.h"
#include "tests/alloc/counting.h"

namespace kiln_test {
std::atomic<bool> counting{false};
std::atomic<int64_t> allocations{0};
}  // namespace kiln_test

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

// KILN_ALLOC_TRACE=1 writes each counted allocation's call stack to stderr
// (resolve the addresses with addr2line -f -C -e build/kiln_alloc_tests).
static void count() {
  if (!kiln_test::counting.load(std::memory_order_relaxed)) return;
  kiln_test::allocations.fetch_add(1, std::memory_order_relaxed);
  static const bool trace = getenv("KILN_ALLOC_TRACE") != nullptr;
  thread_local bool tracing = false;  // backtrace may allocate itself
  if (!trace || tracing) return;
  tracing = true;
  void* frames[24];
  const int depth = backtrace(frames, 24);
  backtrace_symbols_fd(frames + 1, depth - 1, STDERR_FILENO);
  write(STDERR_FILENO, "--\n", 3);
  tracing = false;
}
void* malloc(size_t n) {
  count();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  count();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  count();
  return __libc_realloc(p, n);
}
void* aligned_alloc(size_t alignment, size_t n) {
  count();
  return __libc_memalign(alignment, n);
}
void* memalign(size_t alignment, size_t n) {
  count();
  return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, size_t alignment, size_t n) {
  count();
  void* p = __libc_memalign(alignment, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}

int main(int argc, char** argv) {
  kiln::apply_runtime_defaults(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
