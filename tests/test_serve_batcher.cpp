// kiln serve's batcher runs each batch on a thread of its own; the CPU
// thread count the server was given (kiln serve --threads, that is
// set_num_threads) must reach that thread, whose OpenMP loops would
// otherwise run on OpenMP's default count.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>

#include "apps/serve/batcher.h"
#include "apps/serve/metrics.h"
#include "kiln/backend/backend.h"

namespace kiln {
namespace {

TEST(ServeBatcher, RunsBatchesOnTheThreadCountTheProcessSet) {
  const int saved = get_num_threads();
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
  set_num_threads(saved);
}

}  // namespace
}  // namespace kiln
