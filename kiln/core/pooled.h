// Objects a decoding step makes and drops by the thousand (tensor heads and
// their storage records, each with its shared_ptr control block) come from a
// free list kept per thread, not from the system's allocator:
// std::allocate_shared<T>(PoolAllocator<T>()). A freed block goes to the
// freeing thread's list (up to kKept blocks a type; past that, or once the
// thread's list is gone at its exit, back to the system).
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace kiln {

template <typename T>
class PoolAllocator {
 public:
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: allocate_shared rebinds to its control block

  T* allocate(size_t n) {
    if (n == 1 && state() == kAlive && !list().empty()) {
      void* p = list().back();
      list().pop_back();
      return static_cast<T*>(p);
    }
    if (n == 1 && state() == kUnmade) list();  // made now, so frees of this size are kept
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n == 1 && state() == kAlive && list().size() < kKept) {
      list().push_back(p);
      return;
    }
    ::operator delete(p);
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }

 private:
  static constexpr size_t kKept = 1024;
  enum State : uint8_t { kUnmade, kAlive, kGone };
  // Trivially destructible, so still readable after the list is destroyed
  // (a static tensor freed at exit, after the thread's locals).
  static State& state() {
    thread_local State s = kUnmade;
    return s;
  }
  struct FreeList {
    std::vector<void*> blocks;
    FreeList() {
      blocks.reserve(kKept);
      state() = kAlive;
    }
    ~FreeList() {
      state() = kGone;
      for (void* p : blocks) ::operator delete(p);
    }
  };
  static std::vector<void*>& list() {
    thread_local FreeList free;
    return free.blocks;
  }
};

}  // namespace kiln
