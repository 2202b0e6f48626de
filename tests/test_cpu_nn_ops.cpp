// CPU backend nn / normalisation / optimizer ops against independent, naive
// float64 references written here with plain loops, plus finite differences
// (on the f64 ops) for the backward passes and PyTorch numbers for the
// optimizers. Tensors are read through raw data pointers only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "cpu_nn_test_util.h"
#include "kiln/backend/backend.h"
#include "kiln/core/philox.h"

namespace kiln {
namespace {

using namespace test_nn;

// ---------------------------------------------------------------- softmax

std::vector<double> ref_softmax(const std::vector<double>& x, int64_t C, bool log) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / size_t(C); ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < C; ++j) mx = std::max(mx, x[r * C + j]);
    for (int64_t j = 0; j < C; ++j) sum += std::exp(x[r * C + j] - mx);
    for (int64_t j = 0; j < C; ++j)
      y[r * C + j] = log ? x[r * C + j] - mx - std::log(sum) : std::exp(x[r * C + j] - mx) / sum;
  }
  return y;
}

TEST(CpuNnOpsSoftmax, ForwardMatchesReference) {
  for (const Shape& shape : {Shape{3, 7}, Shape{2, 5, 1}, Shape{4, 2, 33}, Shape{300, 129}}) {
    for (bool log : {false, true}) {
      auto xv = random_values(shape_numel(shape), 1, -5, 5);
      xv[0] = 80.0;  // exp(80) overflows f32: only a max-subtracted softmax survives
      Tensor x = make<float>(xv, shape), y = poisoned(shape);
      cpu().softmax(x, y, log);
      expect_near_all(read<float>(y), ref_softmax(xv, shape.back(), log), 1e-6, 1e-5,
                      shape_str(shape) + (log ? " log" : ""));
    }
  }
}

TEST(CpuNnOpsSoftmax, BackwardMatchesJacobian) {
  const int64_t C = 7, rows = 5;
  for (bool log : {false, true}) {
    auto xv = random_values(rows * C, 2, -3, 3), gv = random_values(rows * C, 3);
    auto s = ref_softmax(xv, C, false);
    // dx_j = sum_i dy_i * d y_i / d x_j, with the Jacobian written out in full.
    std::vector<double> expected(xv.size(), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < C; ++j) {
          const double sj = s[r * C + j], si = s[r * C + i];
          const double jac = log ? (i == j) - sj : si * ((i == j) - sj);
          expected[r * C + j] += gv[r * C + i] * jac;
        }
    Tensor x = make<float>(xv, {rows, C}), y = poisoned({rows, C}), dx = poisoned({rows, C});
    cpu().softmax(x, y, log);
    cpu().softmax_backward(y, make<float>(gv, {rows, C}), dx, log);
    expect_near_all(read<float>(dx), expected, 1e-6, 1e-5, log ? "log-softmax" : "softmax");
  }
}

TEST(CpuNnOpsSoftmax, RejectsMismatchedShapes) {
  Tensor x = make<float>(random_values(6, 1), {2, 3}), y = poisoned({3, 2});
  EXPECT_THROW(cpu().softmax(x, y, false), Error);
}

// ---------------------------------------------------------- cross entropy

TEST(CpuNnOpsCrossEntropy, LossAndGradientMatchReference) {
  const int64_t N = 6, C = 7, ignore = -100;
  const std::vector<int64_t> targets = {3, 0, ignore, 6, 1, 6};
  const double scale = 1.0 / 5.0;
  auto xv = random_values(N * C, 4, -4, 4);
  std::vector<double> loss_ref(N, 0.0), grad_ref(N * C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == ignore) continue;
    std::vector<double> row(xv.begin() + n * C, xv.begin() + (n + 1) * C);
    auto p = ref_softmax(row, C, false);
    loss_ref[n] = -std::log(p[targets[n]]);
    for (int64_t j = 0; j < C; ++j) grad_ref[n * C + j] = (p[j] - (j == targets[n])) * scale;
  }
  for (DType tdt : {DType::i64, DType::i32}) {
    Tensor t = tdt == DType::i64 ? Tensor::from_vector<int64_t>(targets, {N})
                                 : Tensor::from_vector<int32_t>(std::vector<int32_t>(targets.begin(), targets.end()),
                                                                {N});
    Tensor logits = make<float>(xv, {N, C}), losses = poisoned({N}), dlogits = poisoned({N, C});
    cpu().cross_entropy(logits, t, losses, dlogits, float(scale), ignore);
    expect_near_all(read<float>(losses), loss_ref, 1e-6, 1e-5, "losses");
    expect_near_all(read<float>(dlogits), grad_ref, 1e-7, 1e-5, "dlogits");

    // In place: dlogits overwrites the logits, the loss must be unchanged.
    Tensor inplace = make<float>(xv, {N, C}), losses2 = poisoned({N});
    cpu().cross_entropy(inplace, t, losses2, inplace, float(scale), ignore);
    expect_near_all(read<float>(losses2), loss_ref, 1e-6, 1e-5, "in-place losses");
    expect_near_all(read<float>(inplace), grad_ref, 1e-7, 1e-5, "in-place dlogits");

    // Loss only.
    Tensor no_grad;
    Tensor losses3 = poisoned({N});
    cpu().cross_entropy(logits, t, losses3, no_grad, 1.0f, ignore);
    expect_near_all(read<float>(losses3), loss_ref, 1e-6, 1e-5, "loss only");
  }
}

// Autocast's head: f32 logits, the gradient written in bf16 or f16 is the
// f32 gradient rounded (to nearest even); other pairs are refused.
TEST(CpuNnOpsCrossEntropy, NarrowGradientIsTheF32GradientRounded) {
  const int64_t N = 5, C = 11;
  Tensor logits = make<float>(random_values(N * C, 8, -4, 4), {N, C});
  Tensor t = Tensor::from_vector<int64_t>({2, 10, 0, -100, 7}, {N});
  Tensor losses = poisoned({N}), wide = poisoned({N, C});
  cpu().cross_entropy(logits, t, losses, wide, 0.25f, -100);
  for (DType narrow : {DType::bf16, DType::f16}) {
    Tensor d = Tensor::empty({N, C}, narrow), narrow_losses = poisoned({N});
    cpu().cross_entropy(logits, t, narrow_losses, d, 0.25f, -100);
    EXPECT_EQ(read<float>(narrow_losses), read<float>(losses)) << dtype_name(narrow);
    Tensor rounded = wide.to(narrow);
    EXPECT_EQ(std::memcmp(d.data_ptr(), rounded.data_ptr(), size_t(N * C) * dtype_size(narrow)), 0)
        << dtype_name(narrow) << " dlogits are not the f32 gradient rounded";
  }
  Tensor f64_grad = Tensor::empty({N, C}, DType::f64);
  EXPECT_THROW(cpu().cross_entropy(logits, t, losses, f64_grad, 1.0f, -100), Error);
  Tensor bf16_logits = logits.to(DType::bf16), f32_grad = poisoned({N, C});
  EXPECT_THROW(cpu().cross_entropy(bf16_logits, t, losses, f32_grad, 1.0f, -100), Error);
}

TEST(CpuNnOpsCrossEntropy, F64GradientMatchesFiniteDifferences) {
  const int64_t N = 4, C = 5;
  Tensor logits = make<double>(random_values(N * C, 5, -2, 2), {N, C});
  Tensor t = Tensor::from_vector<int64_t>({4, 0, 2, 2}, {N});
  Tensor losses = poisoned({N}, DType::f64), dlogits = poisoned({N, C}, DType::f64);
  cpu().cross_entropy(logits, t, losses, dlogits, 1.0f, -1);
  Tensor no_grad;
  auto total = [&] {
    Tensor l = poisoned({N}, DType::f64);
    cpu().cross_entropy(logits, t, l, no_grad, 1.0f, -1);
    auto v = read<double>(l);
    return v[0] + v[1] + v[2] + v[3];
  };
  expect_near_all(read<double>(dlogits), finite_diff(logits, total), 1e-7, 1e-6, "dlogits vs finite differences");
}

TEST(CpuNnOpsCrossEntropy, LargeBatchIsParallelAndStable) {
  const int64_t N = 512, C = 97;  // enough work for the parallel path
  auto xv = random_values(N * C, 6, -30, 30);
  std::vector<int64_t> tv(N);
  for (int64_t n = 0; n < N; ++n) tv[n] = (n * 13) % C;
  Tensor logits = make<float>(xv, {N, C}), t = Tensor::from_vector<int64_t>(tv, {N});
  Tensor losses = poisoned({N}), dl = poisoned({N, C});
  cpu().cross_entropy(logits, t, losses, dl, 1.0f, -100);
  auto lv = read<float>(losses);
  auto dv = read<float>(dl);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> row(xv.begin() + n * C, xv.begin() + (n + 1) * C);
    ASSERT_NEAR(lv[n], -ref_softmax(row, C, true)[tv[n]], 1e-4) << "row " << n;
    // dlogits = softmax - onehot (scale 1), against the float64 softmax.
    std::vector<double> p = ref_softmax(row, C, false);
    for (int64_t j = 0; j < C; ++j)
      ASSERT_NEAR(dv[n * C + j], p[j] - (j == tv[n] ? 1.0 : 0.0), 1e-6) << "dlogits row " << n << " col " << j;
  }
}

TEST(CpuNnOpsCrossEntropy, OutOfRangeTargetThrows) {
  Tensor logits = make<float>(random_values(14, 7), {2, 7}), losses = poisoned({2}), dl = poisoned({2, 7});
  for (int64_t bad : {7, -1}) {
    Tensor t = Tensor::from_vector<int64_t>({0, bad}, {2});
    try {
      cpu().cross_entropy(logits, t, losses, dl, 1.0f, -100);
      FAIL() << "target " << bad << " did not throw";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("target " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("C = 7"), std::string::npos) << msg;
    }
  }
}

// -------------------------------------------------------------- layernorm

struct LayerNormRef {
  std::vector<double> y, mean, rstd;
};

LayerNormRef ref_layernorm(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                           int64_t N, int64_t C, double eps) {
  LayerNormRef r{std::vector<double>(N * C), std::vector<double>(N), std::vector<double>(N)};
  for (int64_t n = 0; n < N; ++n) {
    double mu = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mu += x[n * C + c] / C;
    for (int64_t c = 0; c < C; ++c) var += (x[n * C + c] - mu) * (x[n * C + c] - mu) / C;
    r.mean[n] = mu;
    r.rstd[n] = 1 / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c) r.y[n * C + c] = (x[n * C + c] - mu) * r.rstd[n] * w[c] + b[c];
  }
  return r;
}

TEST(CpuNnOpsLayerNorm, ForwardMatchesReference) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{5, 7}, {3, 130}, {300, 129}}) {
    auto xv = random_values(N * C, 8, -3, 5), wv = random_values(C, 9), bv = random_values(C, 10);
    Tensor y = poisoned({N, C}), mean = poisoned({N}), rstd = poisoned({N});
    cpu().layernorm(make<float>(xv, {N, C}), make<float>(wv, {C}), make<float>(bv, {C}), 1e-5f, y, mean, rstd);
    auto ref = ref_layernorm(xv, wv, bv, N, C, 1e-5);
    expect_near_all(read<float>(y), ref.y, 1e-5, 1e-5, "y");
    expect_near_all(read<float>(mean), ref.mean, 1e-6, 1e-6, "mean");
    expect_near_all(read<float>(rstd), ref.rstd, 1e-6, 1e-5, "rstd");
  }
}

TEST(CpuNnOpsLayerNorm, BackwardMatchesFiniteDifferences) {
  const int64_t N = 4, C = 7;
  Tensor x = make<double>(random_values(N * C, 11, -2, 2), {N, C});
  Tensor w = make<double>(random_values(C, 12), {C}), b = make<double>(random_values(C, 13), {C});
  auto r = random_values(N * C, 14);  // L = sum(y * r), so dy = r
  auto loss = [&] {
    Tensor y = poisoned({N, C}, DType::f64), m = poisoned({N}, DType::f64), s = poisoned({N}, DType::f64);
    cpu().layernorm(x, w, b, 1e-5f, y, m, s);
    return dot(read<double>(y), r);
  };
  Tensor y = poisoned({N, C}, DType::f64), mean = poisoned({N}, DType::f64), rstd = poisoned({N}, DType::f64);
  cpu().layernorm(x, w, b, 1e-5f, y, mean, rstd);
  Tensor dx = poisoned({N, C}, DType::f64), dw = poisoned({C}, DType::f64), db = poisoned({C}, DType::f64);
  cpu().layernorm_backward(make<double>(r, {N, C}), x, w, mean, rstd, dx, dw, db);
  expect_near_all(read<double>(dx), finite_diff(x, loss), 1e-6, 1e-5, "dx");
  expect_near_all(read<double>(dw), finite_diff(w, loss), 1e-6, 1e-5, "dweight");
  expect_near_all(read<double>(db), finite_diff(b, loss), 1e-6, 1e-5, "dbias");
}

TEST(CpuNnOpsLayerNorm, F32BackwardMatchesF64AndIsDeterministic) {
  const int64_t N = 300, C = 130;  // several column blocks, parallel rows
  auto xv = random_values(N * C, 15, -2, 2), wv = random_values(C, 16), gv = random_values(N * C, 17);
  auto bv = random_values(C, 18);
  auto run = [&]<typename T>(DType dt) {
    Tensor x = make<T>(xv, {N, C}), w = make<T>(wv, {C}), y = poisoned({N, C}, dt);
    Tensor m = poisoned({N}, dt), s = poisoned({N}, dt);
    cpu().layernorm(x, w, make<T>(bv, {C}), 1e-5f, y, m, s);
    Tensor dx = poisoned({N, C}, dt), dw = poisoned({C}, dt), db = poisoned({C}, dt);
    cpu().layernorm_backward(make<T>(gv, {N, C}), x, w, m, s, dx, dw, db);
    return std::vector<std::vector<double>>{read<T>(dx), read<T>(dw), read<T>(db)};
  };
  auto f64 = run.template operator()<double>(DType::f64);
  auto f32 = run.template operator()<float>(DType::f32);
  auto again = run.template operator()<float>(DType::f32);
  const char* names[] = {"dx", "dweight", "dbias"};
  for (int i = 0; i < 3; ++i) {
    expect_near_all(f32[i], f64[i], 1e-4, 1e-4, names[i]);
    EXPECT_EQ(f32[i], again[i]) << names[i] << " differs between two identical runs";
  }
}

// -------------------------------------------------------------- embedding

TEST(CpuNnOpsEmbedding, GatherAndScatterAddMatchReference) {
  const int64_t V = 7, C = 5;
  const std::vector<int64_t> ids = {3, 0, 6, 3, 3, 1};
  auto wv = random_values(V * C, 19);
  for (DType idt : {DType::i64, DType::i32}) {
    Tensor t = idt == DType::i64 ? Tensor::from_vector<int64_t>(ids, {2, 3})
                                 : Tensor::from_vector<int32_t>(std::vector<int32_t>(ids.begin(), ids.end()), {2, 3});
    Tensor out = poisoned({2, 3, C});
    cpu().embedding(make<float>(wv, {V, C}), t, out);
    std::vector<double> expected;
    for (int64_t id : ids)
      for (int64_t c = 0; c < C; ++c) expected.push_back(double(float(wv[id * C + c])));
    expect_near_all(read<float>(out), expected, 0, 0, "gather (an exact copy)");

    auto gv = random_values(6 * C, 20), dw0 = random_values(V * C, 21);
    Tensor dw = make<float>(dw0, {V, C});  // accumulates on top of what is there
    cpu().embedding_backward(make<float>(gv, {2, 3, C}), t, dw);
    std::vector<double> ref = dw0;
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t c = 0; c < C; ++c) ref[ids[i] * C + c] += gv[i * C + c];
    expect_near_all(read<float>(dw), ref, 1e-6, 1e-6, "scatter-add");
  }
}

TEST(CpuNnOpsEmbedding, LargeBackwardIsExactAndDeterministic) {
  const int64_t V = 50, C = 16, n = 5000;  // over the parallel threshold
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = (i * i + 7 * i) % V;
  auto gv = random_values(n * C, 22);
  Tensor t = Tensor::from_vector<int64_t>(ids, {n}), g = make<float>(gv, {n, C});
  // The serial order of float additions, which the parallel path must reproduce bit for bit.
  std::vector<float> ref(V * C, 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < C; ++c) ref[ids[i] * C + c] += float(gv[i * C + c]);
  Tensor dw = make<float>(std::vector<double>(V * C, 0.0), {V, C});
  cpu().embedding_backward(g, t, dw);
  for (int64_t i = 0; i < V * C; ++i) ASSERT_EQ(dw.data<float>()[i], ref[i]) << "element " << i;
}

TEST(CpuNnOpsEmbedding, OutOfRangeIdThrows) {
  Tensor w = make<float>(random_values(14, 23), {7, 2}), out = poisoned({2, 2}), dw = poisoned({7, 2});
  for (int64_t bad : {7, -1}) {
    Tensor t = Tensor::from_vector<int64_t>({1, bad}, {2});
    try {
      cpu().embedding(w, t, out);
      FAIL() << "id " << bad << " did not throw";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("id " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("7"), std::string::npos) << msg;
    }
    EXPECT_THROW(cpu().embedding_backward(poisoned({2, 2}), t, dw), Error);
  }
}

// ---------------------------------------------------------------- dropout

TEST(CpuNnOpsDropout, MaskFollowsPhiloxFormulaAndStatistics) {
  const int64_t n = 100003;
  const float p = 0.3f;
  Tensor mask = poisoned({n});
  cpu().dropout_mask(mask, p, 1234, 10);
  const float* m = mask.data<float>();
  const float keep = 1.0f / (1.0f - p);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float expected = philox_uniform(1234, 10, uint64_t(i)) >= p ? keep : 0.0f;
    ASSERT_EQ(m[i], expected) << "element " << i;
    kept += m[i] != 0.0f;
  }
  EXPECT_NEAR(double(kept) / double(n), 1.0 - p, 0.01);
}

TEST(CpuNnOpsDropout, SameStreamSameMaskAndOffsetsShiftTheStream) {
  const int64_t n = 1001;
  auto draw = [&](uint64_t seed, uint64_t offset) {
    Tensor mask = poisoned({n});
    cpu().dropout_mask(mask, 0.5f, seed, offset);
    return read<float>(mask);
  };
  EXPECT_EQ(draw(7, 3), draw(7, 3));
  EXPECT_NE(draw(7, 3), draw(7, 3 + uint64_t(n)));
  EXPECT_NE(draw(7, 3), draw(8, 3));
  // Element i at offset o+1 is element i+1 at offset o, for unaligned offsets too.
  for (uint64_t o : {0u, 1u, 2u, 3u, 5u}) {
    auto a = draw(7, o), b = draw(7, o + 1);
    for (int64_t i = 0; i + 1 < n; ++i) ASSERT_EQ(b[i], a[i + 1]) << "offset " << o << " element " << i;
  }
}

TEST(CpuNnOpsDropout, EdgeProbabilitiesAndF64) {
  Tensor mask = poisoned({37});
  cpu().dropout_mask(mask, 0.0f, 1, 0);
  for (double v : read<float>(mask)) EXPECT_EQ(v, 1.0);
  cpu().dropout_mask(mask, 1.0f, 1, 0);
  for (double v : read<float>(mask)) EXPECT_EQ(v, 0.0);
  Tensor m64 = poisoned({37}, DType::f64), m32 = poisoned({37});
  cpu().dropout_mask(m64, 0.25f, 9, 2);
  cpu().dropout_mask(m32, 0.25f, 9, 2);
  auto a = read<double>(m64), b = read<float>(m32);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i] != 0.0, b[i] != 0.0) << "element " << i;
  EXPECT_THROW(cpu().dropout_mask(mask, 1.5f, 1, 0), Error);
}

// ------------------------------------------------------------- optimizers
// Expected values are torch.optim.AdamW / torch.optim.SGD (PyTorch 1.13) on
// p = [1, -2, 0.5] with grads [0.5, -0.1, 0] then [0.2, 0.3, -4], each
// multiplied by grad_scale = 0.5; lr 0.1, weight decay 0.01.

template <typename T>
std::vector<ParamSlots> one_param(DType dt, bool with_v) {
  ParamSlots s;
  s.param = make<T>({1.0, -2.0, 0.5}, {3});
  s.grad = poisoned({3}, dt);
  s.m = make<T>({0, 0, 0}, {3});
  if (with_v) s.v = make<T>({0, 0, 0}, {3});
  return {s};
}

const std::vector<std::vector<double>> kGrads = {{0.5, -0.1, 0.0}, {0.2, 0.3, -4.0}};

struct AdamWExpected {
  std::vector<std::vector<double>> p;  // after step 1 and step 2
  std::vector<double> m, v;            // after step 2
};

template <typename T>
void check_adamw(DType dt, const AdamWExpected& expected, double tol) {
  auto params = one_param<T>(dt, true);
  AdamWArgs args;
  args.lr = 0.1f, args.weight_decay = 0.01f, args.grad_scale = 0.5f;
  for (int step = 0; step < 2; ++step) {
    std::copy(kGrads[step].begin(), kGrads[step].end(), params[0].grad.template data<T>());
    args.step = step + 1;
    cpu().adamw_step(params, args);
    expect_near_all(read<T>(params[0].param), expected.p[step], tol, tol,
                    "adamw param, step " + std::to_string(step + 1));
  }
  expect_near_all(read<T>(params[0].m), expected.m, tol, tol, "adamw m");
  expect_near_all(read<T>(params[0].v), expected.v, tol, tol, "adamw v");
}

TEST(CpuNnOpsOptimizers, AdamWMatchesPyTorchTwoSteps) {
  // torch float32, hyperparameters lr 0.1, betas (0.9, 0.999), eps 1e-8.
  check_adamw<float>(DType::f32,
                     {{{0.8990000486373901, -1.8980000019073486, 0.49950000643730164},
                       {0.8082435131072998, -1.9455209970474243, 0.5734142065048218}},
                      {0.032499998807907104, 0.010500000789761543, -0.20000000298023224},
                      {7.243750587804243e-05, 2.499750189599581e-05, 0.004000000189989805}},
                     1e-6);
  // torch float64 with the same hyperparameters rounded to f32 first, as
  // AdamWArgs holds them (0.999f is not 0.999), so f64 agrees to f64 precision.
  check_adamw<double>(DType::f64,
                      {{{0.8990000025173344, -1.8980000185247812, 0.4995000000037253},
                        {0.8082434861757974, -1.9455209994757425, 0.5734141841203397}},
                       {0.03250000715255723, 0.010500002622604398, -0.20000004768371582},
                       {7.243656820057787e-05, 2.499717819929081e-05, 0.003999948501586914}},
                      1e-12);
}

TEST(CpuNnOpsOptimizers, SgdMatchesPyTorchTwoSteps) {
  struct Case {
    float momentum;
    bool nesterov;
    std::vector<std::vector<double>> p;
    std::vector<double> buf;
    float weight_decay;
  };
  const std::vector<Case> cases = {
      {0.9f, false, {{0.974, -1.993, 0.4995}, {0.9396259784698486, -1.9997069835662842, 0.6985505223274231}},
       {0.34373998641967773, 0.06706999987363815, -1.9905049800872803}, 0.01f},
      {0.9f, true, {{0.9506, -1.9867, 0.49905}, {0.9087339043617249, -2.0057554244995117, 0.8776968121528625}},
       {0.34350597858428955, 0.06713300198316574, -1.9905095100402832}, 0.01f},
      {0.0f, false, {{0.975, -1.995, 0.5}, {0.965, -2.01, 0.7}}, {}, 0.0f},
  };
  for (const Case& c : cases) {
    auto params = one_param<float>(DType::f32, false);
    if (c.momentum == 0.0f) params[0].m = Tensor();  // no buffer needed without momentum
    SgdArgs args;
    args.lr = 0.1f, args.momentum = c.momentum, args.nesterov = c.nesterov, args.weight_decay = c.weight_decay;
    args.grad_scale = 0.5f;
    for (int step = 0; step < 2; ++step) {
      std::copy(kGrads[step].begin(), kGrads[step].end(), params[0].grad.data<float>());
      args.first_step = step == 0;
      cpu().sgd_step(params, args);
      expect_near_all(read<float>(params[0].param), c.p[step], 1e-6, 1e-6,
                      "sgd momentum " + std::to_string(c.momentum) + (c.nesterov ? " nesterov" : ""));
    }
    if (!c.buf.empty()) expect_near_all(read<float>(params[0].m), c.buf, 1e-6, 1e-6, "sgd momentum buffer");
  }
}

TEST(CpuNnOpsOptimizers, ManyParamsAndMismatchedSlotsThrow) {
  // Several parameters of different sizes (one over the parallel threshold) in one call.
  std::vector<ParamSlots> params;
  for (int64_t n : {1, 7, 40000}) {
    ParamSlots s;
    s.param = make<float>(std::vector<double>(n, 1.0), {n});
    s.grad = make<float>(std::vector<double>(n, 2.0), {n});
    s.m = make<float>(std::vector<double>(n, 0.0), {n});
    params.push_back(s);
  }
  SgdArgs args;
  args.lr = 0.5f;
  cpu().sgd_step(params, args);
  for (const ParamSlots& s : params)
    for (double v : read<float>(s.param)) ASSERT_EQ(v, 0.0);

  AdamWArgs adam;  // v missing
  EXPECT_THROW(cpu().adamw_step(params, adam), Error);
  params[0].grad = make<float>({1, 2}, {2});
  EXPECT_THROW(cpu().sgd_step(params, args), Error);
}

}  // namespace
}  // namespace kiln
