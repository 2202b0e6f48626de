// OffloadAdamW with the parameters on a GPU: gradients stream to pinned host
// buffers on the transfer stream during backward, AdamW runs on the CPU,
// the weights upload back; the result matches plain AdamW on the same GPU.
// The reference trains on the GPU too, so that both see the same TF32
// gradients: against a CPU reference, TF32's ~1e-3 error in a gradient near
// zero moves AdamW's normalised step by more than any tight bound.
#include <gtest/gtest.h>

#include "kiln/autograd/ops.h"
#include "kiln/backend/factory.h"
#include "kiln/nn/layers.h"
#include "kiln/optim/offload.h"

namespace kiln {
namespace {

std::shared_ptr<nn::Sequential> mlp(uint64_t seed) {
  Generator init(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<nn::Linear>(64, 256, init)).add(std::make_shared<nn::ReLU>());
  m->add(std::make_shared<nn::Linear>(256, 10, init));
  return m;
}

TEST(CudaOffload, StreamsGradientsDuringBackwardAndMatchesCpuAdamW) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto reference_model = mlp(1), gpu_model = mlp(1);
  reference_model->to(Device::cuda());
  gpu_model->to(Device::cuda());
  optim::AdamW reference(reference_model->named_parameters(), 1e-2);
  optim::OffloadAdamW offload(gpu_model->named_parameters(), 1e-2, {}, Device::cpu(), /*bucket_bytes=*/4096);
  ASSERT_GE(offload.bucket_count(), 2);
  Generator data(2);
  for (int step = 0; step < 3; ++step) {
    Tensor x = nn::normal_tensor({32, 64}, 1.0, data);
    std::vector<int64_t> labels(32);
    for (int i = 0; i < 32; ++i) labels[i] = (i * 7 + step) % 10;
    Tensor y = Tensor::from_vector<int64_t>(labels, {32});
    reference.zero_grad();
    offload.zero_grad();
    cross_entropy(reference_model->forward(x.to(Device::cuda())), y.to(Device::cuda())).backward();
    cross_entropy(gpu_model->forward(x.to(Device::cuda())), y.to(Device::cuda())).backward();
    EXPECT_EQ(offload.buckets_sent_during_backward(), offload.bucket_count());
    for (const Tensor& p : gpu_model->parameters()) EXPECT_FALSE(p.grad().defined());
    reference.step();
    offload.step();
  }
  auto want = reference_model->parameters(), got = gpu_model->parameters();
  for (size_t i = 0; i < want.size(); ++i) {
    std::vector<float> w = want[i].to_vector<float>(), g = got[i].to_vector<float>();
    ASSERT_EQ(w.size(), g.size());
    for (size_t j = 0; j < w.size(); ++j) ASSERT_NEAR(g[j], w[j], 1e-4 + 1e-4 * std::abs(w[j])) << "param " << i;
  }
}

}  // namespace
}  // namespace kiln
