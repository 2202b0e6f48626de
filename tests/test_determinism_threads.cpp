// Results do not depend on the thread count, bit for bit: the README and
// the CPU backend promise it (each output element is accumulated in a fixed
// order), and a resume on a machine with another core count relies on it.
// Each test compares 1 thread with 2 and with 3, under the instruction set
// in force: the suite runs them again capped at each lower level the machine
// has (KILN_MAX_ISA, kiln/cpu/isa.h), so every dispatch path is checked.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "kiln/amp/autocast.h"
#include "kiln/backend/backend.h"
#include "kiln/cpu/gemm.h"
#include "kiln/cpu/isa.h"
#include "kiln/nn/layers.h"
#include "kiln/optim/optimizer.h"
#include "models/gpt/gpt.h"
#include "models/vision/classifiers.h"

namespace kiln {
namespace {

using Results = std::vector<std::pair<std::string, Tensor>>;

// Restores the thread count a test changed.
struct ThreadCount {
  int saved = get_num_threads();
  ~ThreadCount() { set_num_threads(saved); }
};

// run() at 1 thread, then at 2 and 3, each result bitwise equal to 1 thread's.
void expect_same_at_1_2_3_threads(const std::function<Results()>& run) {
  ThreadCount restore;
  set_num_threads(1);
  const Results one = run();
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    const Results other = run();
    ASSERT_EQ(one.size(), other.size());
    for (size_t i = 0; i < one.size(); ++i) {
      const Tensor &a = one[i].second, &b = other[i].second;
      ASSERT_EQ(a.shape(), b.shape()) << one[i].first;
      ASSERT_EQ(a.dtype(), b.dtype()) << one[i].first;
      EXPECT_EQ(0, std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()))
          << one[i].first << " differs between 1 and " << threads << " threads under "
          << cpu::isa_name(cpu::max_isa());
    }
  }
}

// The loss, every gradient and every weight after one AdamW step.
Results training_step(nn::Module& model, const std::function<Tensor()>& loss_of) {
  optim::AdamW opt(model.named_parameters(), 1e-3);
  Tensor loss = loss_of();
  loss.backward();
  Results out{{"loss", loss.detach().clone()}};
  for (auto& [name, p] : model.named_parameters()) out.emplace_back("grad " + name, p.grad().clone());
  opt.step();
  for (auto& [name, p] : model.named_parameters()) out.emplace_back("weight " + name, p.clone());
  return out;
}

// One GPT training step, big enough that the matmuls, layernorms,
// reductions and cross-entropy take their parallel paths.
Results gpt_step() {
  models::GptConfig c;
  c.vocab_size = 512, c.block_size = 64, c.n_layer = 2, c.n_head = 4, c.n_embd = 128;
  Generator init(3);
  models::Gpt model(c, init, std::make_shared<Generator>(0));
  std::vector<int64_t> ids(16 * 64), targets(16 * 64);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int64_t((i * 37) % 512);
    targets[i] = int64_t((i * 101 + 7) % 512);
  }
  return training_step(model, [&] {
    return model.loss(Tensor::from_vector(ids, {16, 64}), Tensor::from_vector(targets, {16, 64}));
  });
}

TEST(DeterminismAcrossThreads, GptTrainingStepIsBitwiseEqualAt1To3Threads) { expect_same_at_1_2_3_threads(gpt_step); }

// The same under bf16 autocast: bf16 products (oneDNN's bf16 matmuls where
// they are faster, else f32 products on rounded operands) and attention.
TEST(DeterminismAcrossThreads, Bf16GptTrainingStepIsBitwiseEqualAt1To3Threads) {
  expect_same_at_1_2_3_threads([] {
    amp::AutocastGuard bf16(DType::bf16);
    return gpt_step();
  });
}

// The CNN: oneDNN's convolutions, max pooling, dropout and the MLP head.
// The one exception to the promise is oneDNN's convolution weight gradient,
// whose sums over the batch are split between threads (docs/ARCHITECTURE.md):
// the convolutions' weight gradients, and so their updated weights, are
// left out; everything else, their bias gradients and every input gradient
// included, is compared.
TEST(DeterminismAcrossThreads, CnnTrainingStepIsBitwiseEqualAt1To3Threads) {
  expect_same_at_1_2_3_threads([] {
    Generator init(7), data(8);
    auto model = models::make_cnn(init, std::make_shared<Generator>(1));
    Tensor images = nn::uniform_tensor({32, 1, 28, 28}, 1.0, data);
    std::vector<int64_t> labels(32);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i * 7 % 10);
    Tensor targets = Tensor::from_vector(labels, {32});
    Results all = training_step(*model, [&] { return cross_entropy((*model)(images), targets); });
    Results kept;
    for (auto& [name, t] : all) {
      const std::string parameter = name.substr(name.find(' ') + 1);
      if (parameter != "0.weight" && parameter != "3.weight") kept.emplace_back(name, t);
    }
    EXPECT_EQ(kept.size() + 4, all.size()) << "the convolutions are no longer layers 0 and 3";
    return kept;
  });
}

// The f32 products alone, at shapes an element of whose C lands at
// another place in a per-thread split than in the whole product (oneDNN's
// AVX2 sgemm summed such elements in another order), transposed or not.
TEST(DeterminismAcrossThreads, MatrixProductsAreBitwiseEqualAt1To3Threads) {
  struct Shape3 {
    bool ta, tb;
    int64_t m, n, k;
  };
  const Shape3 shapes[] = {{false, true, 1024, 512, 128}, {true, false, 512, 128, 1024}, {true, false, 784, 512, 64},
                           {false, true, 8, 784, 512},    {false, false, 1000, 300, 77}, {true, true, 257, 1031, 33},
                           {true, false, 128, 128, 1024}};  // one block of the grid, K long enough to split
  expect_same_at_1_2_3_threads([&] {
    Results out;
    Generator g(11);
    for (const Shape3& s : shapes) {
      Tensor a = nn::normal_tensor({s.m * s.k}, 1.0, g), b = nn::normal_tensor({s.k * s.n}, 1.0, g);
      Tensor c = Tensor::empty({s.m, s.n});
      cpu::gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data<float>(), s.ta ? s.m : s.k, b.data<float>(), s.tb ? s.k : s.n,
                0.0f, c.data<float>(), s.n);
      out.emplace_back(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k), c);
    }
    return out;
  });
}

TEST(DeterminismAcrossThreads, ReductionsAndLayernormAreBitwiseEqualAt1To3Threads) {
  Generator g(5);
  Tensor x = nn::normal_tensor({512, 768}, 3.0, g);
  Tensor w = nn::normal_tensor({768}, 1.0, g), b = nn::normal_tensor({768}, 1.0, g);
  expect_same_at_1_2_3_threads([&] {
    Tensor xr = x.detach().clone().set_requires_grad();
    Tensor wr = w.detach().clone().set_requires_grad(), br = b.detach().clone().set_requires_grad();
    Results out = {{"sum dim 0", sum(x, {0})}, {"sum dim 1", sum(x, {1})}, {"mean", mean(x)},
                   {"amax", amax(x, {1})},     {"sum all", sum(x)}};
    Tensor y = layer_norm(xr, wr, br);
    sum(mul(y, y)).backward();
    out.insert(out.end(), {{"layernorm", y.detach()},
                           {"layernorm dx", xr.grad()},
                           {"layernorm dweight", wr.grad()},
                           {"layernorm dbias", br.grad()}});
    return out;
  });
  // The whole-tensor sum (chunked, vectorised, in double) is the f64 sum,
  // rounded to f32: within one f32 rounding of it.
  const double exact = sum(to_dtype(x, DType::f64)).item();
  EXPECT_NEAR(sum(x).item(), exact, std::abs(exact) * 6e-8) << "sum all against f64";
}

}  // namespace
}  // namespace kiln
