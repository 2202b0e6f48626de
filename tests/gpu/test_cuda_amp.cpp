// Mixed precision on CUDA, as training runs it (recipes::MixedPrecision):
// a GPT step under bf16 autocast against the CPU's, and an f16 step whose
// scaled gradient overflows on the device, which must be skipped with the
// scale backed off, then the next step going through unscaled.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "apps/recipes/precision.h"
#include "kiln/amp/autocast.h"
#include "kiln/autograd/ops.h"
#include "kiln/backend/factory.h"
#include "models/gpt/gpt.h"

namespace kiln {
namespace {

struct AmpStep {
  double loss;
  std::map<std::string, std::vector<float>> grads;
};

AmpStep bf16_gpt_step(Device device) {
  models::GptConfig c;
  c.vocab_size = 96, c.block_size = 32, c.n_layer = 2, c.n_head = 2, c.n_embd = 64;
  Generator init(21);
  models::Gpt model(c, init, std::make_shared<Generator>(1));
  model.to(device);
  Generator g(6);
  std::vector<int64_t> ids(2 * 32), targets(2 * 32);
  for (auto& v : ids) v = int64_t(g.below(96));
  for (auto& v : targets) v = int64_t(g.below(96));
  Tensor loss;
  {
    amp::AutocastGuard autocast(DType::bf16);
    loss = model.loss(Tensor::from_vector(ids, {2, 32}).to(device), Tensor::from_vector(targets, {2, 32}).to(device));
  }
  loss.backward();
  AmpStep r{loss.item(), {}};
  for (auto& [name, p] : model.named_parameters()) {
    EXPECT_EQ(p.grad().dtype(), DType::f32) << name;  // master weights and their gradients stay f32
    r.grads[name] = p.grad().to_vector<float>();
  }
  return r;
}

// Relative error over the whole tensor: max |a - b| / max |b|.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    ref = std::max(ref, std::abs(double(b[i])));
  }
  return ref == 0 ? diff : diff / ref;
}

// Both devices round the same products to bf16, but accumulate in their own
// orders: they agree to bf16's precision, not bit for bit.
TEST(CudaAmp, GptStepUnderBf16AutocastMatchesTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  AmpStep cpu = bf16_gpt_step(Device::cpu()), gpu = bf16_gpt_step(Device::cuda(0));
  ASSERT_TRUE(std::isfinite(gpu.loss));
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-2 * std::abs(cpu.loss));
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (auto& [name, g] : cpu.grads) EXPECT_LT(relative_error(gpu.grads.at(name), g), 5e-2) << name;
}

TEST(CudaAmp, Fp16OverflowOnTheDeviceSkipsTheStepAndBacksOff) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  recipes::MixedPrecision mp("fp16");
  Tensor w = full({1, 4}, 0.5).to(Device::cuda(0)).set_requires_grad();
  Tensor x = full({1, 4}, 1.0).to(Device::cuda(0));
  std::vector<std::string> lines;
  auto log = [&](const std::string& s) { lines.push_back(s); };
  auto loss_fn = [&] {
    amp::AutocastGuard autocast(mp.autocast_dtype());
    return sum(to_dtype(linear(x, w, Tensor()), DType::f32));
  };
  // The scaled d(loss)/d(y) is 65536, past f16's largest finite value (65504):
  // the f16 gradient on the device is inf, and the scaler must see it there.
  EXPECT_FALSE(mp.backward(loss_fn(), {w}, 3, log));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "step 3: skipped, inf/NaN gradients; loss scale -> 32768");
  EXPECT_EQ(mp.skipped_steps(), 1);
  w.zero_grad();
  EXPECT_TRUE(mp.backward(loss_fn(), {w}, 4, log));
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().device(), Device::cuda(0));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1.f, 1.f, 1.f, 1.f}));
  EXPECT_EQ(lines.size(), 1u);
}

}  // namespace
}  // namespace kiln
