// Results do not depend on the thread count, bit for bit: the README and
// the CPU backend promise it (each output element is accumulated in a fixed
// order), and a resume on a machine with another core count relies on it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kiln/backend/backend.h"
#include "kiln/nn/layers.h"
#include "kiln/optim/optimizer.h"
#include "models/gpt/gpt.h"

namespace kiln {
namespace {

// Restores the thread count a test changed.
struct ThreadCount {
  int saved = get_num_threads();
  ~ThreadCount() { set_num_threads(saved); }
};

void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(0, std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes())) << what << " differs between 1 and 2 threads";
}

// One GPT training step (forward, backward, AdamW), big enough that the
// matmuls, layernorms, reductions and cross-entropy take their parallel paths.
std::vector<std::pair<std::string, Tensor>> gpt_step(int threads) {
  set_num_threads(threads);
  models::GptConfig c;
  c.vocab_size = 512, c.block_size = 64, c.n_layer = 2, c.n_head = 4, c.n_embd = 128;
  Generator init(3);
  models::Gpt model(c, init, std::make_shared<Generator>(0));
  optim::AdamW opt(model.named_parameters(), 1e-3);
  std::vector<int64_t> ids(16 * 64), targets(16 * 64);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int64_t((i * 37) % 512);
    targets[i] = int64_t((i * 101 + 7) % 512);
  }
  Tensor loss = model.loss(Tensor::from_vector(ids, {16, 64}), Tensor::from_vector(targets, {16, 64}));
  loss.backward();
  std::vector<std::pair<std::string, Tensor>> out{{"loss", loss.detach().clone()}};
  for (auto& [name, p] : model.named_parameters()) out.emplace_back("grad " + name, p.grad().clone());
  opt.step();
  for (auto& [name, p] : model.named_parameters()) out.emplace_back("weight " + name, p.clone());
  return out;
}

TEST(DeterminismAcrossThreads, GptTrainingStepIsBitwiseEqualAtOneAndTwoThreads) {
  ThreadCount restore;
  auto one = gpt_step(1), two = gpt_step(2);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) expect_bitwise(one[i].second, two[i].second, one[i].first);
}

TEST(DeterminismAcrossThreads, ReductionsAndLayernormAreBitwiseEqualAtOneAndTwoThreads) {
  ThreadCount restore;
  Generator g(5);
  Tensor x = nn::normal_tensor({512, 768}, 3.0, g);
  Tensor w = nn::normal_tensor({768}, 1.0, g), b = nn::normal_tensor({768}, 1.0, g);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Tensor xr = x.detach().clone().set_requires_grad();
    Tensor wr = w.detach().clone().set_requires_grad(), br = b.detach().clone().set_requires_grad();
    std::vector<Tensor> out = {sum(x, {0}), sum(x, {1}), mean(x), amax(x, {1}), sum(x)};
    Tensor y = layer_norm(xr, wr, br);
    sum(mul(y, y)).backward();
    out.insert(out.end(), {y.detach(), xr.grad(), wr.grad(), br.grad()});
    return out;
  };
  auto one = run(1), two = run(2);
  const char* names[] = {"sum dim 0", "sum dim 1", "mean", "amax", "sum all", "layernorm", "layernorm dx",
                         "layernorm dweight", "layernorm dbias"};
  for (size_t i = 0; i < one.size(); ++i) expect_bitwise(one[i], two[i], names[i]);
  // The whole-tensor sum (chunked, vectorised, in double) is the f64 sum,
  // rounded to f32: within one f32 rounding of it.
  const double exact = sum(to_dtype(x, DType::f64)).item();
  EXPECT_NEAR(one[4].item(), exact, std::abs(exact) * 6e-8) << "sum all against f64";
}

}  // namespace
}  // namespace kiln
