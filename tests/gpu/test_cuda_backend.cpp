// CUDA backend: availability, the caching allocator, GPU info, copy and fill.
// Every test reports SKIPPED on a machine without a usable GPU.
#include "kiln/backend/gpu_info.h"
#include "tests/gpu/cuda_test_util.h"

namespace kiln::cuda_test {
namespace {

const DType kAllDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8};

TEST(CudaBackend, ReportsAvailability) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  EXPECT_EQ(gpu().type(), DeviceType::cuda);
  EXPECT_EQ(gpu().name(), "cuda");
  EXPECT_GE(gpu().device_count(), 1);
  EXPECT_EQ(kiln::cuda_unavailable_reason(), "");
  gpu().synchronize(0);
  EXPECT_THROW(gpu().synchronize(gpu().device_count()), kiln::Error);
}

TEST(CudaBackendAllocator, CachesFreedBlocksAndCountsBytes) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  Allocator& alloc = allocator_for(Device::cuda());
  const MemoryStats before = alloc.stats();
  const size_t bytes = size_t(3) << 20;
  {
    Tensor t = Tensor::empty({int64_t(bytes)}, DType::u8, Device::cuda());
    const MemoryStats during = alloc.stats();
    EXPECT_EQ(during.current, before.current + bytes);
    EXPECT_GE(during.reserved, during.current);
    EXPECT_GE(during.peak, during.current);
  }
  const MemoryStats after = alloc.stats();
  EXPECT_EQ(after.current, before.current);
  EXPECT_GE(after.reserved, bytes) << "a freed block should stay cached";
  {
    Tensor again = Tensor::empty({int64_t(bytes)}, DType::u8, Device::cuda());
    EXPECT_EQ(alloc.stats().reserved, after.reserved) << "the cached block should be reused, not a new cudaMalloc";
  }
}

TEST(CudaBackendAllocator, OutOfMemoryThrowsAnActionableError) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  try {
    Tensor huge = Tensor::empty({int64_t(1) << 50}, DType::u8, Device::cuda());
    FAIL() << "allocating 1 PiB succeeded";
  } catch (const kiln::OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory on cuda:0: allocating 1048576.00 GiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("from the driver"), std::string::npos) << msg;
    EXPECT_NE(msg.find("kiln plan"), std::string::npos) << msg;
  }
  Tensor small = Tensor::empty({16}, DType::f32, Device::cuda());  // still usable afterwards
  gpu().fill(small, 1.0);
  expect_equal(small, host_from_values(std::vector<double>(16, 1.0), {16}, DType::f32), "fill after OOM");
}

TEST(CudaBackendGpuInfo, ReportsSaneNumbers) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  std::vector<GpuInfo> gpus = query_gpus(true);
  ASSERT_EQ(int(gpus.size()), gpu().device_count());
  for (const GpuInfo& g : gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_GE(g.cc_major, 3);
    EXPECT_GT(g.sm_count, 0);
    EXPECT_TRUE(g.cuda_cores == g.sm_count * 64 || g.cuda_cores == g.sm_count * 128 || g.cuda_cores == g.sm_count * 192)
        << g.cuda_cores << " cores on " << g.sm_count << " SMs";
    EXPECT_GT(g.memory_bytes, size_t(1) << 30);
    EXPECT_GT(g.theoretical_bandwidth_gbs, 100.0);
    EXPECT_GT(g.measured_bandwidth_gbs, 10.0);
    EXPECT_LT(g.measured_bandwidth_gbs, 2.5 * g.theoretical_bandwidth_gbs);
    EXPECT_FALSE(g.tensor_core_generation.empty());
    // NVML ships with the driver, so a machine that runs CUDA reads it.
    ASSERT_EQ(g.nvml_error, "");
    EXPECT_GT(g.power_limit_w, 10.0);
    EXPECT_GT(g.power_draw_w, 1.0);
    EXPECT_LE(g.power_draw_w, 1.5 * g.power_limit_w);
    EXPECT_GT(g.sm_clock_mhz, 0);
    EXPECT_LE(g.sm_clock_mhz, g.sm_clock_max_mhz);
    EXPECT_GT(g.memory_clock_mhz, 0);
    EXPECT_LE(g.memory_clock_mhz, g.memory_clock_max_mhz);
    EXPECT_GT(g.temperature_c, 5);
    EXPECT_LT(g.temperature_c, g.shutdown_temperature_c);
    EXPECT_GT(g.slowdown_temperature_c, 50);
    EXPECT_LE(g.slowdown_temperature_c, g.shutdown_temperature_c);
  }
}

TEST(CudaBackendCopy, HostDeviceRoundTripIsExactForEveryDtype) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (DType t : kAllDtypes) {
    for (int64_t n : {int64_t(1), int64_t(1037), int64_t(1) << 20}) {
      Tensor h = dtype_is_floating(t) ? host_random({n}, t, 7 + n, -5, 5) : host_random_ints({n}, t, 7 + n, 0, 200);
      expect_equal(to_gpu(h), h, std::string("round trip ") + dtype_name(t) + " n=" + std::to_string(n));
    }
  }
}

TEST(CudaBackendCopy, CastsBetweenEveryPairOfDtypesLikeTheCpu) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (DType from : kAllDtypes) {
    // Non-negative values below 200 fit every dtype; fractions test truncation to ints.
    Tensor h = host_random({5, 67}, from, 11, 0.0, 200.0);
    Tensor d = to_gpu(h);
    for (DType to : kAllDtypes) {
      Tensor want = cpu_empty(h.shape(), to);
      cpu().copy(h, want);
      Tensor got = gpu_poisoned(h.shape(), to);
      gpu().copy(d, got);
      expect_equal(got, want, std::string("cast ") + dtype_name(from) + " -> " + dtype_name(to));
    }
  }
}

TEST(CudaBackendCopy, StridedSourcesOnTheDevice) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (DType t : {DType::f32, DType::bf16, DType::f64, DType::i64}) {
    for (Layout l : {Layout::transposed, Layout::sliced, Layout::expanded}) {
      Pair x = random_view({6, 5, 13}, t, l, 3);
      Tensor got = gpu_poisoned(x.dev.shape(), t);
      gpu().copy(x.dev, got);
      expect_equal(got, host_cast(x.host, t), std::string("copy from ") + layout_name(l) + " " + dtype_name(t));
      // Same view, cast to f32 on the way.
      Tensor cast = gpu_poisoned(x.dev.shape(), DType::f32);
      gpu().copy(x.dev, cast);
      expect_equal(cast, host_cast(x.host, DType::f32), std::string("cast from ") + layout_name(l));
    }
  }
}

TEST(CudaBackendCopy, StridedDestinationLeavesTheGapsAlone) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  Tensor src = host_random({9, 31}, DType::f32, 5);
  Tensor base = gpu_poisoned({9, 63}, DType::bf16);
  Tensor view = base.as_strided({9, 31}, {63, 2}, 1);  // odd columns 1, 3, ..., 61
  gpu().copy(src, view);                               // host f32 -> strided device bf16
  std::vector<double> all = host_values(to_host(base)), want = host_values(host_cast(src, DType::bf16));
  for (int64_t r = 0; r < 9; ++r)
    for (int64_t c = 0; c < 63; ++c) {
      const double v = all[size_t(r * 63 + c)];
      if (c % 2 == 1 && c < 62)
        EXPECT_EQ(v, want[size_t(r * 31 + c / 2)]) << r << "," << c;
      else
        EXPECT_TRUE(std::isnan(v)) << "element " << r << "," << c << " outside the view was written";
    }
}

TEST(CudaBackendCopy, DeviceToStridedHostWithCast) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  Pair x = random_view({7, 12}, DType::f16, Layout::transposed, 8);
  Tensor host_base = host_from_values(std::vector<double>(7 * 25, -1.0), {7, 25}, DType::f64);
  Tensor host_view = host_base.as_strided({7, 12}, {25, 2}, 0);
  gpu().copy(x.dev, host_view);
  std::vector<double> all = host_values(host_base), want = host_values(x.host);
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t c = 0; c < 25; ++c) {
      const double v = all[size_t(r * 25 + c)];
      if (c % 2 == 0 && c < 24)
        EXPECT_EQ(v, want[size_t(r * 12 + c / 2)]);
      else
        EXPECT_EQ(v, -1.0) << "host element " << r << "," << c << " outside the view was written";
    }
}

TEST(CudaBackendFill, MatchesTheCpuForEveryDtypeAndLayout) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (DType t : kAllDtypes) {
    for (double value : {0.0, -0.0, 3.7, 100.25}) {
      Tensor want = cpu_empty({4, 9}, t);
      cpu().fill(want, value);
      Tensor got = gpu_poisoned({4, 9}, t);
      gpu().fill(got, value);
      expect_equal(got, want, std::string("fill ") + dtype_name(t) + " " + std::to_string(value));
    }
  }
  Tensor base = gpu_poisoned({5, 8}, DType::f32);
  Tensor view = base.as_strided({4, 3}, {8, 2}, 9);
  gpu().fill(view, 2.5);
  std::vector<double> all = host_values(to_host(base));
  int written = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const int64_t r = int64_t(i) / 8, c = int64_t(i) % 8;
    const bool in_view = r >= 1 && c >= 1 && c <= 5 && (c - 1) % 2 == 0;
    if (in_view) {
      EXPECT_EQ(all[i], 2.5);
      ++written;
    } else {
      EXPECT_TRUE(std::isnan(all[i])) << "fill wrote outside its view at " << r << "," << c;
    }
  }
  EXPECT_EQ(written, 12);
}

}  // namespace
}  // namespace kiln::cuda_test
