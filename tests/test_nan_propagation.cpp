// NaN and +-inf reach the output of every op, forward and backward, exactly
// where PyTorch puts them: the divergence check and the fp16 loss scaler
// rely on a blow-up reaching the loss or the gradients, and the CPU is the
// reference the CUDA kernels are checked against.
//
// tests/parity/nan_reference.py runs each case in Debian's PyTorch; this
// test runs the same ops in Kiln and compares NaN positions and inf signs
// exactly, finite values closely.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>
#include <map>

#include <nlohmann/json.hpp>

#include "apps/recipes/precision.h"
#include "kiln/nn/layers.h"
#include "kiln/optim/optimizer.h"
#include "torch_required.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Inputs = std::vector<Tensor>;

double decode(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  const std::string s = v.get<std::string>();
  if (s == "nan") return std::nan("");
  return s == "inf" ? INFINITY : -INFINITY;
}

Tensor tensor_of(const nlohmann::json& j) {
  std::vector<double> values;
  for (const auto& v : j.at("values")) values.push_back(decode(v));
  Shape shape = j.at("shape").get<Shape>();
  Tensor t = Tensor::from_vector(values, shape);
  return j.value("dtype", "float32") == "int64" ? t.to(DType::i64) : t.to(DType::f32);
}

// Kiln's version of each op in nan_reference.py, inputs in PyTorch's order.
const std::map<std::string, std::function<Tensor(const Inputs&)>>& kiln_ops() {
  static const std::map<std::string, std::function<Tensor(const Inputs&)>> ops = {
      {"relu", [](const Inputs& x) { return relu(x[0]); }},
      {"gelu", [](const Inputs& x) { return gelu(x[0]); }},
      {"tanh", [](const Inputs& x) { return tanh(x[0]); }},
      {"sigmoid", [](const Inputs& x) { return sigmoid(x[0]); }},
      {"exp", [](const Inputs& x) { return exp(x[0]); }},
      {"log", [](const Inputs& x) { return log(x[0]); }},
      {"sqrt", [](const Inputs& x) { return sqrt(x[0]); }},
      {"neg", [](const Inputs& x) { return neg(x[0]); }},
      {"square", [](const Inputs& x) { return square(x[0]); }},
      {"add", [](const Inputs& x) { return add(x[0], x[1]); }},
      {"sub", [](const Inputs& x) { return sub(x[0], x[1]); }},
      {"mul", [](const Inputs& x) { return mul(x[0], x[1]); }},
      {"div", [](const Inputs& x) { return div(x[0], x[1]); }},
      {"maximum", [](const Inputs& x) { return maximum(x[0], x[1]); }},
      {"sum", [](const Inputs& x) { return sum(x[0], {-1}); }},
      {"mean", [](const Inputs& x) { return mean(x[0], {-1}); }},
      {"amax", [](const Inputs& x) { return amax(x[0], {-1}); }},
      {"argmax", [](const Inputs& x) { return argmax(x[0], -1); }},
      {"softmax", [](const Inputs& x) { return softmax(x[0], -1); }},
      {"log_softmax", [](const Inputs& x) { return log_softmax(x[0], -1); }},
      {"cross_entropy", [](const Inputs& x) { return cross_entropy(x[0], x[1]); }},
      {"layer_norm", [](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); }},
      {"matmul", [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {"max_pool2d", [](const Inputs& x) { return max_pool2d(x[0], 2); }},
      {"embedding", [](const Inputs& x) { return embedding(x[1], x[0]); }},
      {"attention", [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }},
      {"conv2d", [](const Inputs& x) { return conv2d(x[0], x[1], Tensor()); }},
  };
  return ops;
}

// NaN where PyTorch has NaN, the same infinities, and finite values within
// float32 tolerance.
void expect_same_specials(const std::string& what, const Tensor& got, const nlohmann::json& want_json) {
  Tensor want = tensor_of(want_json);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << "[" << i << "]: PyTorch gives NaN, Kiln " << g[i];
    } else if (std::isinf(w[i])) {
      EXPECT_EQ(g[i], w[i]) << what << "[" << i << "]";
    } else {
      EXPECT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::abs(w[i])) << what << "[" << i << "]";
    }
  }
}

TEST(NanPropagation, EveryOpForwardAndBackwardMatchesPyTorch) {
  KILN_SKIP_OR_FAIL_WITHOUT_TORCH("the NaN/inf propagation test");
  const fs::path file = fs::path(KILN_BINARY_DIR) / ("nan_reference_" + std::to_string(::getpid()) + ".json");
  const std::string cmd = std::string(testing::kPython) + " '" + KILN_SOURCE_DIR + "/tests/parity/nan_reference.py' '" +
                          file.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(file);
  const nlohmann::json cases = nlohmann::json::parse(in);
  fs::remove(file);
  ASSERT_GE(cases.size(), 25u);
  for (const auto& c : cases) {
    const std::string op = c.at("op");
    SCOPED_TRACE(op + " " + c.at("inputs").dump());
    ASSERT_TRUE(kiln_ops().count(op)) << "no Kiln op for " << op;
    Inputs inputs;
    for (const auto& j : c.at("inputs")) {
      inputs.push_back(tensor_of(j));
      if (j.at("requires_grad").get<bool>()) inputs.back().set_requires_grad();
    }
    Tensor out = kiln_ops().at(op)(inputs);
    expect_same_specials(op + " forward", out, c.at("out"));
    if (!out.requires_grad()) continue;
    out.backward(ones(out.shape()));
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (c.at("grads")[i].is_null()) continue;
      ASSERT_TRUE(inputs[i].grad().defined()) << op << ": no gradient for input " << i;
      expect_same_specials(op + " backward, input " + std::to_string(i), inputs[i].grad(), c.at("grads")[i]);
    }
  }
}

// A NaN gradient poisons the parameter it updates, as in PyTorch: the next
// loss shows it. (Clamping it away would hide the blow-up.)
TEST(NanPropagation, OptimizerStepsCarryANanGradientIntoTheWeights) {
  for (bool adam : {true, false}) {
    Generator init(1);
    nn::Linear layer(2, 2, init);
    std::unique_ptr<optim::Optimizer> opt;
    if (adam) opt = std::make_unique<optim::AdamW>(layer.named_parameters(), 1e-3);
    else opt = std::make_unique<optim::SGD>(layer.named_parameters(), 1e-3);
    Tensor x = Tensor::from_vector<float>({NAN, 1.0f}, {1, 2});
    sum(layer.forward(x)).backward();
    opt->step();
    std::vector<float> w = layer.weight.to_vector<float>();
    EXPECT_TRUE(std::isnan(w[0])) << (adam ? "AdamW" : "SGD");
  }
}

// The training step's two guards see a poisoned step: in fp32 the loss is
// non-finite (the recipe's divergence check stops the run); in fp16 the
// scaler reports the step as non-finite and backs the scale off.
TEST(NanPropagation, APoisonedStepReachesTheLossAndTheScaler) {
  Generator init(2);
  nn::Linear layer(4, 3, init);
  Tensor x = nn::normal_tensor({5, 4}, 1.0, init);
  std::vector<float> poisoned = x.to_vector<float>();
  poisoned[7] = NAN;  // one input value of one example
  Tensor bad = Tensor::from_vector(poisoned, {5, 4});
  Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 0, 1}, {5});
  EXPECT_TRUE(std::isnan(cross_entropy(layer.forward(bad), y).item()));

  recipes::MixedPrecision fp16("fp16");
  Tensor loss;
  {
    amp::AutocastGuard autocast(fp16.autocast_dtype());
    loss = cross_entropy(layer.forward(bad), y);
  }
  std::vector<std::string> lines;
  const bool finite = fp16.backward(loss, layer.parameters(), 1, [&](const std::string& l) { lines.push_back(l); });
  EXPECT_FALSE(finite);
  EXPECT_EQ(fp16.skipped_steps(), 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("skipped, inf/NaN gradients; loss scale -> 32768"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace kiln
