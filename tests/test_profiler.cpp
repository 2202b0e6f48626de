// The per-op timer: counts every backend call while enabled, and nothing
// while disabled.
#include <gtest/gtest.h>

#include "kiln/backend/profiler.h"
#include "kiln/nn/layers.h"

namespace kiln {
namespace {

TEST(Profiler, CountsEveryBackendCallWhileEnabled) {
  Generator init(1);
  nn::Linear layer(4, 3, init);
  Tensor x = nn::normal_tensor({2, 4}, 1.0, init);
  Profiler::reset();
  Profiler::enable();
  Tensor y = layer.forward(x);   // one matmul (bias folded in)
  sum(y).backward();             // reductions, matmuls for the gradients
  Profiler::enable(false);
  auto times = Profiler::snapshot();
  ASSERT_TRUE(times.count("cpu:matmul"));
  EXPECT_GE(times.at("cpu:matmul").calls, 2) << "forward and at least one backward product";
  double total = 0;
  for (const auto& [op, t] : times) {
    EXPECT_GT(t.calls, 0) << op;
    EXPECT_GE(t.seconds, 0) << op;
    total += t.seconds;
  }
  const std::string report = Profiler::report(total + 1.0);
  EXPECT_NE(report.find("cpu:matmul"), std::string::npos);
  EXPECT_NE(report.find("framework overhead"), std::string::npos);
  // Disabled: nothing is recorded.
  Profiler::reset();
  layer.forward(x);
  EXPECT_TRUE(Profiler::snapshot().empty());
}

TEST(Profiler, SplitsByShapeWhenAskedAndKeepsTheBackendsCapabilities) {
  Generator init(1);
  nn::Linear layer(4, 3, init);
  Tensor x = nn::normal_tensor({2, 4}, 1.0, init);
  const bool fast_bf16 = backend_for(Device::cpu()).fast_bf16_to_f32_matmul();
  const int64_t gemm_rows = backend_for(Device::cpu()).efficient_gemm_rows();
  Profiler::reset();
  Profiler::enable(true, /*by_shape=*/true);
  // The timing wrapper answers as the backend does: ops choose the same paths.
  EXPECT_EQ(backend_for(Device::cpu()).fast_bf16_to_f32_matmul(), fast_bf16);
  EXPECT_EQ(backend_for(Device::cpu()).efficient_gemm_rows(), gemm_rows);
  layer.forward(x);
  Profiler::enable(false);
  auto times = Profiler::snapshot();
  // x [2, 4] times the transposed weight [3, 4] into [2, 3].
  EXPECT_TRUE(times.count("cpu:matmul [2, 4] f32, [4, 3]^T f32, [2, 3] f32")) << Profiler::report(1.0);
}

}  // namespace
}  // namespace kiln
