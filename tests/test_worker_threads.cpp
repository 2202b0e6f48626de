// Threads a program starts run their OpenMP loops on the CPU thread count
// it set (set_num_threads: kiln train --threads, kiln serve --threads).
// OpenMP keeps that count per thread, so without
// use_num_threads_on_this_thread() a worker would run on OpenMP's default.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>

#include "apps/serve/batcher.h"
#include "apps/serve/metrics.h"
#include "kiln/backend/backend.h"
#include "kiln/data/prefetch.h"

namespace kiln {
namespace {

// Restores the thread count a test changed.
struct ThreadCount {
  int saved = get_num_threads();
  ~ThreadCount() { set_num_threads(saved); }
};

TEST(WorkerThreads, ServeBatcherRunsBatchesOnTheProcessThreadCount) {
  ThreadCount restore;
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    std::atomic<int> seen{0};
    serve::Metrics metrics;
    serve::Batcher batcher("m", serve::BatchOptions{}, [&](const Tensor& rows) {
      seen = omp_get_max_threads();
      return rows;
    }, metrics);
    auto answer = batcher.submit(Tensor::from_vector<float>({1, 2}, {1, 2}));
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->get().to_vector<float>(), (std::vector<float>{1, 2}));
    batcher.stop();
    EXPECT_EQ(seen, threads) << "the batch ran on OpenMP's default thread count, not set_num_threads's";
  }
}

TEST(WorkerThreads, DataPrefetcherMakesBatchesOnTheProcessThreadCount) {
  ThreadCount restore;
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    data::Prefetcher<int> prefetch([](const data::LoaderState&) { return omp_get_max_threads(); },
                                   [](const data::LoaderState& s) { return data::LoaderState{0, s.position + 1}; },
                                   nullptr, {}, 2);
    EXPECT_EQ(prefetch.next(), threads) << "the batch was made on OpenMP's default thread count";
  }
}

}  // namespace
}  // namespace kiln
