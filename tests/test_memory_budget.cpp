// A memory budget on a device's allocator, the out-of-memory error, sizes
// as people write them, cpu:N, the simulated device they are tested on, and
// the host allocator's reuse of freed blocks.
#include <gtest/gtest.h>

#include <functional>

#include "kiln/autograd/ops.h"
#include "kiln/core/units.h"
#include "kiln/meta/meta_backend.h"

namespace kiln {
namespace {

TEST(MemoryUnits, ParsesSizesAsPeopleWriteThem) {
  EXPECT_EQ(parse_bytes("2GiB"), size_t(2) << 30);
  EXPECT_EQ(parse_bytes("512MiB"), size_t(512) << 20);
  EXPECT_EQ(parse_bytes("1.5GB"), size_t(1500000000));
  EXPECT_EQ(parse_bytes("300M"), size_t(300) << 20);
  EXPECT_EQ(parse_bytes("4096"), size_t(4096));
  for (const char* bad : {"", "GiB", "-1GiB", "2 GiB", "2PiB", "lots"}) EXPECT_THROW(parse_bytes(bad), Error) << bad;
  EXPECT_EQ(format_bytes(1.5 * (1 << 30)), "1.50 GiB");
  EXPECT_EQ(format_bytes(512.0 * (1 << 20)), "512.0 MiB");
}

// A fresh simulated device per test, so counts start at zero.
Device fresh_device(int index) {
  Device d = Device::parse("cpu:" + std::to_string(index));
  EXPECT_EQ(d.str(), "cpu:" + std::to_string(index));
  EXPECT_EQ(allocator_for(d).stats().current, 0u);
  return d;
}

TEST(MemoryBudget, AnAllocationPastTheBudgetFailsExactlyThere) {
  Device d = fresh_device(11);
  Allocator& a = allocator_for(d);
  a.set_budget(1000);
  Tensor w;
  {
    MemoryCategoryScope weights(MemoryCategory::weights);
    w = Tensor::empty({150}, DType::f32, d);  // 600 bytes
  }
  Tensor x = Tensor::empty({100}, DType::f32, d);  // 1000 bytes: exactly the budget
  try {
    MemoryCategoryScope activations(MemoryCategory::activations);
    Tensor y = Tensor::empty({1}, DType::u8, d);
    FAIL() << "one byte past the budget was allocated";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    for (const char* part : {"out of memory on cpu:11", "allocating 1 B of activations", "over the budget of 1000 B",
                             "weights 600 B", "other 400 B", "kiln plan", "--fit"})
      EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  }
  // The failed allocation left the counts as they were, and freeing makes room.
  EXPECT_EQ(a.stats().current, 1000u);
  EXPECT_EQ(a.stats().peak, 1000u);
  x = Tensor();
  EXPECT_NO_THROW(Tensor::empty({100}, DType::f32, d));
  a.set_budget(0);
  EXPECT_NO_THROW(Tensor::empty({1000}, DType::f32, d));
}

TEST(MemoryBudget, SimulatedDevicesAreSeparateFromTheHost) {
  Device d = fresh_device(12);
  const size_t host_before = allocator_for(Device::cpu()).stats().current;
  Tensor on_device = ones({256}, DType::f32, d);
  EXPECT_EQ(allocator_for(d).stats().current, 1024u);
  EXPECT_EQ(allocator_for(Device::cpu()).stats().current, host_before);
  Tensor back = on_device.to(Device::cpu());
  EXPECT_EQ(back.to_vector<float>(), std::vector<float>(256, 1.0f));
  // Ops check devices as they would for a GPU.
  EXPECT_THROW(add(on_device, back), Error);
  EXPECT_EQ(add(on_device, on_device).device(), d);
}

// A freed block past 64 KiB is taken again by a request a little larger or
// smaller in its size class (a prompt of another length, an expert given
// other tokens), not a fresh mmap whose pages fault again; a size in
// another class gets a block of its own, at most an eighth above its size.
TEST(MemoryBudget, FreedLargeBlocksServeNearbySizesAgain) {
  Device d = fresh_device(13);
  Allocator& a = allocator_for(d);
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({75000}, DType::f32, d);  // 300,000 bytes: the class of 327,680 (10 x 32 KiB)
    first = t.data<float>();
  }
  const size_t reserved = a.stats().reserved;
  EXPECT_EQ(reserved, size_t(327680));
  for (int64_t elements : {int64_t(74000), int64_t(81920)}) {  // 296,000 and 327,680 bytes
    Tensor again = Tensor::empty({elements}, DType::f32, d);
    EXPECT_EQ(again.data<float>(), first) << elements;
    EXPECT_EQ(a.stats().reserved, reserved) << elements;
  }
  Tensor other = Tensor::empty({82000}, DType::f32, d);  // 328,000 bytes: the next class, 360,448
  EXPECT_NE(other.data<float>(), first);
  EXPECT_EQ(a.stats().reserved, reserved + 360448);
  EXPECT_EQ(a.stats().current, 328000u);  // budgets count what was asked for
}

// A large request with no block of its class takes the smallest cached block
// up to twice its size (batches that shrink one after another), and that
// block goes back under its own size; a request whose class is under half of it does not.
TEST(MemoryBudget, SmallerLargeRequestsTakeACachedBlockUpToTwiceTheirSize) {
  Device d = fresh_device(14);
  Allocator& a = allocator_for(d);
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({75000}, DType::f32, d);  // the class of 327,680 bytes
    first = t.data<float>();
  }
  const size_t reserved = a.stats().reserved;
  for (int round = 0; round < 2; ++round) {  // 200,000 bytes, twice: the block comes back as 327,680 both times
    Tensor smaller = Tensor::empty({50000}, DType::f32, d);
    EXPECT_EQ(smaller.data<float>(), first) << round;
    EXPECT_EQ(a.stats().reserved, reserved) << round;
  }
  {
    Tensor again = Tensor::empty({75000}, DType::f32, d);  // its own class again
    EXPECT_EQ(again.data<float>(), first);
  }
  Tensor far_smaller = Tensor::empty({30000}, DType::f32, d);  // 120,000 bytes: its class, 122,880, under half
  EXPECT_NE(far_smaller.data<float>(), first);
  EXPECT_GT(a.stats().reserved, reserved);
}

// A meta tensor has shapes and bytes, no values: reading one is a clear error.
TEST(MetaDevice, ReadingValuesIsAClearError) {
  Tensor t = zeros({3}, DType::f32, Device::meta());
  for (auto read : std::vector<std::function<void()>>{[] { zeros({1}, DType::f32, Device::meta()).item(); }, [&] { t.to_vector<float>(); },
                                                      [&] { t.to(Device::cpu()); }}) {
    try {
      read();
      ADD_FAILURE() << "a meta tensor's values were read";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("meta tensors are for planning"), std::string::npos) << e.what();
    }
  }
}

// The meta device answers the capabilities that change what ops allocate as
// the device it stands in for: a GPU multiplies bf16 into f32 and wants
// thousands of rows a product; this CPU answers for itself.
TEST(MetaDevice, AnswersCapabilitiesAsTheDeviceItModels) {
  Backend& meta = backend_for(Device::meta());
  const Backend& cpu = backend_for(Device::cpu());
  EXPECT_EQ(meta.fast_bf16_to_f32_matmul(), cpu.fast_bf16_to_f32_matmul());
  EXPECT_EQ(meta.efficient_gemm_rows(), cpu.efficient_gemm_rows());
  meta::ModelledDeviceScope gpu(DeviceType::cuda);
  EXPECT_TRUE(meta.fast_bf16_to_f32_matmul());
  EXPECT_EQ(meta.efficient_gemm_rows(), kCudaEfficientGemmRows);
}

}  // namespace
}  // namespace kiln
