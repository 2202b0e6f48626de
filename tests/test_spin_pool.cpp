// Decoding's spinning pool (kiln/cpu/spin_pool.h): every chunk of every
// loop runs exactly once, on at most the threads asked for, whoever calls
// and however loops nest; a chunk's exception reaches the caller.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kiln/cpu/spin_pool.h"

namespace kiln {
namespace {

TEST(SpinPool, EveryChunkRunsOnceOnAtMostTheThreadsAskedFor) {
  for (int threads : {1, 2, 3, 4})
    for (int64_t chunks : {int64_t(0), int64_t(1), int64_t(2), int64_t(7), int64_t(64)}) {
      for (int loop = 0; loop < 50; ++loop) {
        std::vector<std::atomic<int>> runs(static_cast<size_t>(chunks));
        std::mutex mutex;
        std::set<std::thread::id> ran_on;
        cpu::spin_parallel_for(chunks, threads, [&](int64_t i) {
          runs[size_t(i)].fetch_add(1);
          std::lock_guard<std::mutex> lock(mutex);
          ran_on.insert(std::this_thread::get_id());
        });
        for (int64_t i = 0; i < chunks; ++i)
          ASSERT_EQ(runs[size_t(i)].load(), 1) << threads << " threads, " << chunks << " chunks, chunk " << i;
        ASSERT_LE(ran_on.size(), size_t(threads));
      }
    }
}

// Loops called from four threads at once (one uses the pool, the others run
// their own chunks), and a loop inside a chunk (run by that chunk's thread).
TEST(SpinPool, ConcurrentCallersAndNestedLoopsRunEveryChunk) {
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int loop = 0; loop < 200; ++loop)
        cpu::spin_parallel_for(5, 2, [&](int64_t) {
          cpu::spin_parallel_for(3, 2, [&](int64_t) { total.fetch_add(1); });
        });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * 5 * 3);
}

TEST(SpinPool, AChunksExceptionReachesTheCallerAndThePoolGoesOn) {
  for (int loop = 0; loop < 20; ++loop)
    EXPECT_THROW(cpu::spin_parallel_for(16, 2,
                                        [&](int64_t i) {
                                          if (i == 11) throw std::runtime_error("chunk 11");
                                        }),
                 std::runtime_error);
  std::atomic<int> runs{0};
  cpu::spin_parallel_for(16, 2, [&](int64_t) { runs.fetch_add(1); });
  EXPECT_EQ(runs.load(), 16);
}

}  // namespace
}  // namespace kiln
