#include "kiln/cpu/spin_pool.h"

#include <omp.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {
namespace {

// Longer than the host code between a step's loops (under 15 us, measured
// with kiln_hf_bench's profile), and short, so that a server's other
// threads soon get the core: kiln serve's 16 streams made 268.6 tokens/s
// with 200 us and 309.5-313.1 with 50, the bench the same (111.2, 112.1).
constexpr auto kSpin = std::chrono::microseconds(50);

inline void relax() {
#ifdef KILN_X86_INTRINSICS
  _mm_pause();
#endif
}

thread_local bool t_in_pool_loop = false;

// The ticket is the loop's generation (high 32 bits) and its next chunk (low
// 32): a chunk is taken by one compare-and-swap, which fails for a thread
// that read an older loop's description. While a loop is being described
// its ticket holds kDescribing, so a reader that met the description half
// written sees the ticket change and reads again (a sequence lock).
constexpr uint64_t kDescribing = 0xFFFFFFFFu;

class SpinPool {
 public:
  bool try_run(int64_t chunks, int threads, const ChunkFn& chunk) {
    std::unique_lock<std::mutex> lock(in_use_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    while (int(workers_.size()) < threads - 1) {
      const int index = int(workers_.size());
      workers_.emplace_back([this, index] { work(index); });
      workers_.back().detach();
    }
    const uint64_t generation = (ticket_.load() >> 32) + 1;
    ticket_.store(generation << 32 | kDescribing);
    job_.store(&chunk);
    job_chunks_.store(chunks);
    job_threads_.store(threads);
    done_.store(0);
    failure_ = nullptr;
    ticket_.store(generation << 32);
    if (sleepers_.load() > 0) {
      wake_.fetch_add(1);
      wake_.notify_all();
    }
    take_chunks(generation, chunk, chunks);
    for (int spins = 0; done_.load(std::memory_order_acquire) < chunks; ++spins) {
      relax();
      if (spins > 1000) sched_yield();  // a worker the kernel descheduled mid-chunk needs a core
    }
    if (failure_) std::rethrow_exception(failure_);
    return true;
  }

 private:
  // Takes and runs this generation's chunks until none is left.
  void take_chunks(uint64_t generation, const ChunkFn& chunk, int64_t chunks) {
    t_in_pool_loop = true;
    for (uint64_t t = ticket_.load(); t >> 32 == generation && int64_t(t & kDescribing) < chunks;) {
      if (!ticket_.compare_exchange_weak(t, t + 1)) continue;
      try {
        chunk(int64_t(t & kDescribing));
      } catch (...) {
        std::lock_guard<std::mutex> guard(failure_mutex_);
        if (!failure_) failure_ = std::current_exception();
      }
      done_.fetch_add(1, std::memory_order_release);
      t = ticket_.load();
    }
    t_in_pool_loop = false;
  }

  [[noreturn]] void work(int index) {
    uint64_t seen = 0;  // the last generation this worker looked at
    auto idle_since = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      const uint64_t t = ticket_.load();
      const uint64_t generation = t >> 32;
      if (generation != seen && (t & kDescribing) != kDescribing) {
        const ChunkFn* chunk = job_.load();
        const int64_t chunks = job_chunks_.load();
        const int threads = job_threads_.load();
        if (ticket_.load() >> 32 != generation) continue;  // described again while read
        seen = generation;
        if (index < threads - 1) take_chunks(generation, *chunk, chunks);
        idle_since = std::chrono::steady_clock::now();
        spins = 0;
        continue;
      }
      relax();
      if (spins % 64 != 0 || std::chrono::steady_clock::now() - idle_since < kSpin) continue;
      // Asleep until the next loop (sleepers_ and the ticket, read in this
      // order here and the other way round by try_run, cannot both miss).
      const uint32_t wake = wake_.load();
      sleepers_.fetch_add(1);
      if (ticket_.load() >> 32 == seen) wake_.wait(wake);
      sleepers_.fetch_sub(1);
      idle_since = std::chrono::steady_clock::now();
    }
  }

  std::mutex in_use_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> ticket_{0};
  std::atomic<const ChunkFn*> job_{nullptr};
  std::atomic<int64_t> job_chunks_{0};
  std::atomic<int> job_threads_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<uint32_t> wake_{0};
  std::mutex failure_mutex_;
  std::exception_ptr failure_;
};

}  // namespace

void spin_parallel_for(int64_t chunks, int threads, const ChunkFn& chunk) {
  // Never destroyed: its threads are detached and may outlive main().
  static SpinPool* pool = new SpinPool;
  if (threads > 1 && chunks > 1 && chunks < int64_t(kDescribing) && !t_in_pool_loop && !omp_in_parallel() && pool->try_run(chunks, threads, chunk))
    return;
  for (int64_t i = 0; i < chunks; ++i) chunk(i);
}

}  // namespace kiln::cpu
