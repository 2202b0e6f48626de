// OffloadAdamW: AdamW with master weights and moments in host memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "apps/recipes/recipe.h"
#include "checkpoint_test_util.h"
#include "run_test_util.h"
#include "kiln/io/checkpoint.h"
#include "kiln/nn/layers.h"
#include "kiln/optim/offload.h"

namespace kiln {
namespace {

std::shared_ptr<nn::Sequential> small_model(uint64_t seed) {
  Generator init(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<nn::Linear>(6, 8, init)).add(std::make_shared<nn::ReLU>());
  m->add(std::make_shared<nn::Linear>(8, 3, init));
  return m;
}

void train_steps(nn::Module& model, optim::Optimizer& opt, int steps) {
  Generator data(9);
  for (int s = 0; s < steps; ++s) {
    Tensor x = nn::normal_tensor({5, 6}, 1.0, data);
    Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 1, 0}, {5});
    opt.zero_grad();
    cross_entropy(model.forward(x.to(model.parameters()[0].dtype())), y).backward();
    opt.lr = 1e-2 * (s + 1);
    opt.step();
  }
}

// The same kernel on the same numbers: bitwise equal to AdamW, weights and
// state, with and without decay on the biases.
TEST(Offload, Fp32MatchesAdamWBitwise) {
  for (bool matrices_only : {false, true}) {
    optim::AdamWOptions o;
    o.weight_decay = 0.1;
    o.decay_matrices_only = matrices_only;
    auto a = small_model(1), b = small_model(1);
    optim::AdamW plain(a->named_parameters(), 1e-2, o);
    optim::OffloadAdamW offload(b->named_parameters(), 1e-2, o);
    train_steps(*a, plain, 4);
    train_steps(*b, offload, 4);
    auto pa = a->named_parameters(), pb = b->named_parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(pa[i].second.data_ptr(), pb[i].second.data_ptr(), pa[i].second.nbytes()))
          << pa[i].first;
      EXPECT_EQ(0, std::memcmp(pa[i].second.data_ptr(), (*offload.master_weights())[i].second.data_ptr(),
                               pa[i].second.nbytes()));
    }
    auto sa = plain.state(), sb = offload.state();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
      EXPECT_EQ(sa[i].first, sb[i].first);
      EXPECT_EQ(0, std::memcmp(sa[i].second.data_ptr(), sb[i].second.data_ptr(), sa[i].second.nbytes()));
    }
  }
}

// 2-byte parameters on the device: the master stays f32 and the parameters
// are its rounding, so small updates accumulate instead of vanishing.
TEST(Offload, Bf16ParametersAreTheRoundedF32Master) {
  auto model = small_model(2);
  model->to(DType::bf16);
  optim::OffloadAdamW opt(model->named_parameters(), 1e-2);
  train_steps(*model, opt, 3);
  const auto& master = *opt.master_weights();
  auto params = model->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].second.dtype(), DType::bf16);
    EXPECT_EQ(master[i].second.dtype(), DType::f32);
    EXPECT_EQ(params[i].second.to_vector<float>(), copy_to(master[i].second, Device::cpu(), DType::bf16).to_vector<float>());
  }
  // Checkpoint round trip: state and master load into a fresh optimizer.
  auto other = small_model(3);
  other->to(DType::bf16);
  optim::OffloadAdamW restored(other->named_parameters(), 1e-2);
  restored.load_state(opt.state(), opt.step_count());
  restored.load_master_weights(master);
  EXPECT_EQ((*restored.master_weights())[0].second.to_vector<float>(), master[0].second.to_vector<float>());
  EXPECT_EQ(restored.step_count(), 3);
  nn::NamedTensors missing(master.begin() + 1, master.end());
  EXPECT_THROW(restored.load_master_weights(missing), Error);
}

// Gradients stream to the host bucket by bucket while backward runs: on a
// budgeted "device" (cpu:21, as a GPU would be), the device never holds more
// than about a bucket of gradients, and two micro-batches (the second adds
// on the host) still give AdamW's update bit for bit.
TEST(Offload, GradientsStreamToTheHostDuringBackward) {
  const Device device = Device::parse("cpu:21");
  auto a = small_model(5), b = small_model(5);
  b->to(device);
  optim::AdamW plain(a->named_parameters(), 1e-2);
  // Gradients: w1 192 B, b1 32 B, w2 96 B, b2 12 B; buckets of >= 100 B in
  // backward's order: [b2, w2] (108 B) and [b1, w1] (224 B).
  const int64_t bucket_bytes = 100;
  optim::OffloadAdamW offload(b->named_parameters(), 1e-2, {}, Device::cpu(), bucket_bytes);
  ASSERT_EQ(offload.bucket_count(), 2);
  Allocator& on_device = allocator_for(device);
  Generator data(9);
  for (int s = 0; s < 3; ++s) {
    Tensor x = nn::normal_tensor({6, 6}, 1.0, data);
    Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 1, 0, 2}, {6});
    plain.zero_grad();
    offload.zero_grad();
    on_device.reset_peak();
    for (int64_t first : {0, 3}) {  // two micro-batches of 3, each weighted by its share
      mul_scalar(cross_entropy(a->forward(x.slice(0, first, first + 3)), y.slice(0, first, first + 3)), 0.5).backward();
      mul_scalar(cross_entropy(b->forward(x.slice(0, first, first + 3).to(device)), y.slice(0, first, first + 3).to(device)),
                 0.5).backward();
      EXPECT_EQ(offload.buckets_sent_during_backward(), offload.bucket_count() * (first == 0 ? 1 : 2));
      for (const Tensor& p : b->parameters()) EXPECT_FALSE(p.grad().defined()) << "left on the device after backward";
    }
    const size_t peak_grads = on_device.stats().peak_by_category[size_t(MemoryCategory::grads)];
    EXPECT_EQ(peak_grads, 224u) << "the device holds one bucket of gradients at a time, not all 332 B";
    plain.step();
    offload.step();
  }
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector<float>(), pb[i].second.to_vector<float>()) << pa[i].first;
}

// fp16 unscaling and clipping happen on the host copies that step() reads.
TEST(Offload, GradientsAreTheHostBuffersTheStepReads) {
  auto a = small_model(6), b = small_model(6);
  optim::AdamW plain(a->named_parameters(), 1e-2);
  optim::OffloadAdamW offload(b->named_parameters(), 1e-2);
  Generator data(3);
  Tensor x = nn::normal_tensor({5, 6}, 1.0, data);
  Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 1, 0}, {5});
  const std::pair<nn::Module*, optim::Optimizer*> runs[] = {{a.get(), &plain}, {b.get(), &offload}};
  for (auto [model, opt] : runs) {
    opt->zero_grad();
    cross_entropy(model->forward(x), y).backward();
    std::vector<Tensor> grads = opt->gradients();
    ASSERT_EQ(grads.size(), 4u);
    EXPECT_GT(optim::clip_gradients(grads, 0.01), 0.01);
    opt->step();
  }
  for (const Tensor& g : offload.gradients()) EXPECT_TRUE(g.device().is_cpu());
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector<float>(), pb[i].second.to_vector<float>()) << pa[i].first;
}

TEST(Offload, StateIsBookedAsOptimizerMemory) {
  auto model = small_model(4);
  const size_t before = allocator_for(Device::cpu()).stats().current_by_category[size_t(MemoryCategory::optimizer)];
  optim::OffloadAdamW opt(model->named_parameters(), 1e-2);
  const size_t after = allocator_for(Device::cpu()).stats().current_by_category[size_t(MemoryCategory::optimizer)];
  EXPECT_EQ(after - before, size_t(model->parameter_count()) * 4 * 4) << "master, two moments, gradient buffer";
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

namespace fs = std::filesystem;

recipes::TrainOptions offload_run(const std::string& recipe, const fs::path& dir) {
  recipes::TrainOptions o;
  o.recipe = recipe;
  o.steps = 5;
  o.batch_size = 16;
  o.out_dir = dir.string();
  o.progress = false;
  o.threads = 2;
  o.offload = true;
  o.cache_dir = std::string(KILN_BINARY_DIR) + "/test-cache";
  return o;
}

fs::path fresh(const std::string& name) { return testing::fresh_test_dir("test-offload", name); }

// `kiln train --offload` in fp32 runs the same AdamW kernel on the same
// numbers: the checkpoint equals a plain run's bit for bit.
TEST(Offload, RecipeInFp32EqualsThePlainRun) {
  recipes::TrainOptions with = offload_run("fashion-mlp", fresh("mlp-offload"));
  recipes::TrainOptions without = offload_run("fashion-mlp", fresh("mlp-plain"));
  without.offload = false;
  with.stop_after = without.stop_after = 5;
  auto quiet = [](const std::string&) {};
  Checkpoint a = load_checkpoint(recipes::train(with, quiet).checkpoint);
  Checkpoint b = load_checkpoint(recipes::train(without, quiet).checkpoint);
  testing::expect_bitwise_equal(a.model, b.model);
  testing::expect_bitwise_equal(a.optimizer, b.optimizer);
  EXPECT_EQ(a.state.at("offload"), true);
}

// bf16 with offload: 2-byte parameters on the device, f32 master weights in
// the checkpoint, and a resume that is bitwise the uninterrupted run.
TEST(Offload, Bf16GptTrainsAndResumesBitwise) {
  fs::path root = fresh("gpt");
  auto quiet = [](const std::string&) {};
  recipes::TrainOptions straight = offload_run("fortunes-gpt", root / "straight");
  straight.precision = "bf16";
  recipes::TrainResult s = recipes::train(straight, quiet);
  EXPECT_TRUE(std::isfinite(s.val_loss));
  recipes::TrainOptions first = offload_run("fortunes-gpt", root / "resumed");
  first.precision = "bf16";
  first.stop_after = 2;
  recipes::train(first, quiet);
  recipes::TrainOptions second = first;
  second.stop_after = 0;
  second.resume = true;
  recipes::TrainResult r = recipes::train(second, quiet);
  EXPECT_EQ(r.start_step, 2);
  Checkpoint a = load_checkpoint(s.checkpoint), b = load_checkpoint(r.checkpoint);
  for (const auto& [name, t] : a.model) EXPECT_EQ(t.dtype(), DType::f32) << name << ": the master weights";
  testing::expect_bitwise_equal(a.model, b.model);
  testing::expect_bitwise_equal(a.optimizer, b.optimizer);
}

}  // namespace
}  // namespace kiln
