// sample_token draws in proportion to softmax(logits / temperature), within
// top_k and the top_p nucleus: checked by counting many draws against the
// exact probabilities (4.5 standard deviations, so a correct sampler fails
// about once in 10^5 runs; a wrong weight, block or nucleus by far more).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "models/common/language_model.h"

namespace kiln {
namespace {

// Draws `n` tokens and counts each.
std::map<int32_t, int64_t> counts(const std::vector<float>& logits, double temperature, int64_t top_k, double top_p,
                                  int64_t n, uint64_t seed = 7) {
  Generator gen(seed);
  std::map<int32_t, int64_t> c;
  for (int64_t i = 0; i < n; ++i) ++c[models::sample_token(logits, temperature, top_k, top_p, gen)];
  return c;
}

// Each of `expected` (token -> probability) drawn as often as a binomial allows.
void expect_frequencies(const std::map<int32_t, int64_t>& drawn, const std::map<int32_t, double>& expected,
                        int64_t n) {
  int64_t seen = 0;
  for (const auto& [token, count] : drawn) {
    ASSERT_TRUE(expected.count(token)) << "token " << token << " was drawn " << count << " times, never allowed";
    seen += count;
  }
  EXPECT_EQ(seen, n);
  for (const auto& [token, p] : expected) {
    const double mean = p * double(n), sd = std::sqrt(double(n) * p * (1 - p));
    const int64_t got = drawn.count(token) ? drawn.at(token) : 0;
    EXPECT_NEAR(double(got), mean, 4.5 * sd + 1) << "token " << token << " (p = " << p << ")";
  }
}

// Probabilities softmax(logits / t) over `kept` alone.
std::map<int32_t, double> softmax_over(const std::vector<float>& logits, const std::vector<int32_t>& kept, double t) {
  double total = 0;
  for (int32_t id : kept) total += std::exp(double(logits[size_t(id)]) / t);
  std::map<int32_t, double> p;
  for (int32_t id : kept) p[id] = std::exp(double(logits[size_t(id)]) / t) / total;
  return p;
}

// A 3,000-token vocabulary (three of the sampler's 1,024-token blocks) whose
// mass sits on five tokens spread across the blocks, the rest far below.
std::vector<float> spread_logits() {
  std::vector<float> logits(3000, -80.0f);
  logits[5] = 2.0f, logits[1023] = 1.0f, logits[1024] = 1.5f, logits[2047] = 0.5f, logits[2999] = 0.0f;
  return logits;
}
const std::vector<int32_t> kSpreadTokens = {5, 1023, 1024, 2047, 2999};

TEST(Sampling, TheWholeVocabularyIsDrawnInProportionToItsSoftmax) {
  const auto logits = spread_logits();
  const int64_t n = 20000;
  for (double t : {1.0, 0.5, 2.0})
    expect_frequencies(counts(logits, t, 0, 1.0, n), softmax_over(logits, kSpreadTokens, t), n);
}

TEST(Sampling, EveryTokenOfAFlatVocabularyCanBeDrawn) {
  // Equal logits over 2,500 tokens: all of them are reachable, the last block's included.
  const std::vector<float> logits(2500, 0.25f);
  const auto drawn = counts(logits, 1.0, 0, 1.0, 50000);
  EXPECT_GT(drawn.size(), 2490u);
  EXPECT_TRUE(drawn.count(2499) || drawn.count(2498));
  EXPECT_GE(drawn.begin()->first, 0);
  EXPECT_LT(drawn.rbegin()->first, 2500);
}

TEST(Sampling, TopKKeepsTheKMostLikely) {
  const auto logits = spread_logits();
  const int64_t n = 20000;
  expect_frequencies(counts(logits, 1.0, 2, 1.0, n), softmax_over(logits, {5, 1024}, 1.0), n);
  expect_frequencies(counts(logits, 0.7, 3, 1.0, n), softmax_over(logits, {5, 1024, 1023}, 0.7), n);
}

TEST(Sampling, TopPKeepsTheNucleus) {
  // Sorted probabilities 0.50, 0.30, 0.15, 0.05: top_p 0.7 keeps the first two
  // (0.5 falls short of 0.7), 0.85 the first three, 0.45 the first alone.
  const std::vector<float> logits = {float(std::log(0.15)), float(std::log(0.5)), float(std::log(0.05)),
                                     float(std::log(0.3))};
  const int64_t n = 30000;
  expect_frequencies(counts(logits, 1.0, 0, 0.7, n), softmax_over(logits, {1, 3}, 1.0), n);
  expect_frequencies(counts(logits, 1.0, 0, 0.85, n), softmax_over(logits, {1, 3, 0}, 1.0), n);
  expect_frequencies(counts(logits, 1.0, 0, 0.45, n), {{1, 1.0}}, n);
  // With top_k too, the nucleus is of the top_k's mass: top 2 = 0.8, 0.6 of it is 0.48: token 1 alone.
  expect_frequencies(counts(logits, 1.0, 2, 0.6, n), {{1, 1.0}}, n);
}

TEST(Sampling, ANucleusLargerThanTheFirstSortedHeadIsWholeAndNoLarger) {
  // Equal logits over 1,200 tokens: top_p 0.5 is a nucleus of 600 tokens,
  // past the sampler's first sorted heads (64, 256): no more than those are
  // drawn, and all of them.
  std::vector<float> logits(1200, 1.0f);
  const auto drawn = counts(logits, 1.0, 0, 0.5, 10000);
  EXPECT_EQ(drawn.size(), 600u);
  // A peaked vocabulary's nucleus stays inside the first head: only its tokens.
  std::vector<float> peaked(5000, -40.0f);
  for (int32_t id : {17, 4000, 4999}) peaked[size_t(id)] = 3.0f;
  const auto few = counts(peaked, 1.0, 0, 0.9, 6000);
  std::set<int32_t> seen;
  for (const auto& [token, count] : few) seen.insert(token);
  EXPECT_EQ(seen, (std::set<int32_t>{17, 4000, 4999}));
}

TEST(Sampling, MaskedTokensAreNeverDrawn) {
  // A grammar's mask sets logits to -inf: never drawn, whatever the temperature.
  std::vector<float> logits(3000, -std::numeric_limits<float>::infinity());
  logits[2048] = -5.0f, logits[7] = -6.0f;
  const int64_t n = 6000;
  for (double t : {0.3, 4.0}) {
    expect_frequencies(counts(logits, t, 0, 1.0, n), softmax_over(logits, {7, 2048}, t), n);
    expect_frequencies(counts(logits, t, 0, 0.99, n, 3), softmax_over(logits, {7, 2048}, t), n);
  }
}

}  // namespace
}  // namespace kiln
