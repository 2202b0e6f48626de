// Pipeline parallelism's pieces that run in one process: the layout of
// ranks, the balancing of stages, the bubble, the GPT's stages against the
// whole model, and the 1F1B schedule in a world of one. Runs across ranks
// are tested by tests/cli/pipeline_train.sh under mpirun.
#include <gtest/gtest.h>

#include <set>

#include "kiln/autograd/ops.h"
#include "kiln/distributed/pipeline.h"
#include "models/gpt/presets.h"

namespace kiln {
namespace {

TEST(PipelineLayout, StagesAreNeighbouringRanksAndReplicasStrideBySize) {
  const distributed::PipelineLayout l = distributed::pipeline_layout(5, 8, 4);
  EXPECT_EQ(l.replicas, 2);
  EXPECT_EQ(l.stage, 1);
  EXPECT_EQ(l.replica, 1);
  EXPECT_EQ(l.rank_of(1, 3), 7);
  EXPECT_FALSE(l.first());
  EXPECT_TRUE(distributed::pipeline_layout(3, 4, 4).last());
  EXPECT_THROW(distributed::pipeline_layout(0, 6, 4), Error);
}

TEST(PipelineBalance, EqualLayersSplitEvenlyAndAHeavyLayerStandsAlone) {
  EXPECT_EQ(distributed::balance_stages({1, 1, 1, 1, 1, 1, 1, 1}, 4), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(distributed::balance_stages({1, 1, 1, 5}, 2), (std::vector<int64_t>{0, 3, 4}));
  EXPECT_EQ(distributed::balance_stages({3, 1, 1, 1}, 2), (std::vector<int64_t>{0, 1, 4}));
  EXPECT_EQ(distributed::balance_stages({1, 2, 3}, 3), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_THROW(distributed::balance_stages({1, 1}, 3), Error) << "more stages than layers";
}

TEST(PipelineBalance, BubbleIsStagesLessOneOverMicroBatchesPlusStagesLessOne) {
  EXPECT_DOUBLE_EQ(distributed::bubble_fraction(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(distributed::bubble_fraction(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(distributed::bubble_fraction(2, 1), 0.5);
}

TEST(PipelineBalance, GptBlockFlopsAddUpToThePlannersTotalWithTheHeadOnTheLastBlock) {
  models::GptConfig c = models::gpt_preset("gpt2");
  const std::vector<double> f = models::gpt_block_flops(c);
  ASSERT_EQ(f.size(), size_t(c.n_layer));
  double total = 0;
  for (double x : f) total += x;
  const double n_matmul = double(models::gpt_parameter_count(c) - c.block_size * c.n_embd);
  EXPECT_NEAR(total, 6 * n_matmul + 12.0 * 12 * 1024 * 768, 1e-9 * total);
  EXPECT_DOUBLE_EQ(f[0], f[5]);
  EXPECT_NEAR(f.back() - f[0], 6.0 * (double(c.vocab_size) * 768 + 2 * 768), 1e-6 * f.back());
}

models::GptConfig tiny_gpt() {
  models::GptConfig c;
  c.vocab_size = 61, c.block_size = 16, c.n_layer = 4, c.n_head = 2, c.n_embd = 16;
  return c;
}

std::pair<Tensor, Tensor> tokens(int64_t rows, int64_t T) {
  std::vector<int64_t> ids(size_t(rows * T)), next(size_t(rows * T));
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int64_t((i * 13 + 5) % 61);
    next[i] = int64_t((i * 7 + 1) % 61);
  }
  return {Tensor::from_vector(ids, {rows, T}), Tensor::from_vector(next, {rows, T})};
}

// The whole model's loss and each parameter's gradient (then zeroed again).
std::pair<double, std::vector<std::vector<float>>> whole_model_gradients(models::Gpt& model, const Tensor& x,
                                                                          const Tensor& y) {
  Tensor loss = model.loss(x, y);
  loss.backward();
  std::vector<std::vector<float>> grads;
  for (Tensor p : model.parameters()) {
    grads.push_back(p.grad().to_vector<float>());
    p.zero_grad();
  }
  return {loss.item(), grads};
}

TEST(GptStages, StagesChainedGiveTheWholeModelsLossAndGradients) {
  Generator init(3);
  models::Gpt model(tiny_gpt(), init, std::make_shared<Generator>(1));
  auto [x, y] = tokens(3, 16);
  auto [whole, want] = whole_model_gradients(model, x, y);

  // Each stage's input is cut from the graph, as it arrives over the wire,
  // and its gradient goes back by hand, as the pipeline sends it.
  Tensor a = model.stage_forward(x, y, 0, 1);
  Tensor in_b = a.detach().set_requires_grad(true);
  Tensor b = model.stage_forward(in_b, y, 1, 3);
  Tensor in_c = b.detach().set_requires_grad(true);
  Tensor loss = model.stage_forward(in_c, y, 3, 4);
  EXPECT_EQ(loss.item(), whole);
  loss.backward();
  b.backward(in_c.grad());
  a.backward(in_b.grad());
  const std::vector<Tensor> params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(params[i].grad().to_vector<float>(), want[i]) << model.named_parameters()[i].first;
}

TEST(GptStages, StageParametersCoverTheModelAndShareOnlyTheTiedEmbedding) {
  Generator init(3);
  models::Gpt model(tiny_gpt(), init, std::make_shared<Generator>(1));
  std::multiset<std::string> used;
  for (auto [first, last] : {std::pair{0, 1}, {1, 3}, {3, 4}})
    for (const std::string& n : model.stage_parameter_names(first, last)) used.insert(n);
  for (const auto& [name, p] : model.named_parameters())
    EXPECT_EQ(used.count(name), name == "transformer.wte.weight" ? 2u : 1u) << name;
  EXPECT_EQ(used.size(), model.named_parameters().size() + 1);
  const std::vector<std::string> middle = model.stage_parameter_names(1, 3);
  for (const std::string& n : middle) EXPECT_TRUE(n.starts_with("transformer.h.1.") || n.starts_with("transformer.h.2."));
}

TEST(PipelineSchedule, OneStageInAWorldOfOneIsGradientAccumulation) {
  Generator init(3);
  models::Gpt model(tiny_gpt(), init, std::make_shared<Generator>(1));
  auto [x, y] = tokens(5, 16);
  auto [whole, want] = whole_model_gradients(model, x, y);

  auto world = distributed::make_single_communicator();
  distributed::Pipeline pipeline(*world, 1);
  distributed::StageWork work;
  work.forward = [&](const Tensor& in, const Tensor& t) { return model.stage_forward(in, t, 0, 4); };
  work.activation_shape = [](int64_t rows) { return Shape{rows, 16, 16}; };
  work.backward_loss = [](const Tensor& l) { l.backward(); };
  int armed = 0;
  work.before_last_backward = [&] { ++armed; };
  const double loss = pipeline.train_step(x, y, 2, work);  // micro-batches of 2, 2 and 1 rows
  EXPECT_NEAR(loss, whole, 1e-6);
  EXPECT_EQ(armed, 1);
  std::vector<Tensor> params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> got = params[i].grad().to_vector<float>();
    for (size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(got[k], want[i][k], 1e-5) << i;
  }
}

}  // namespace
}  // namespace kiln
