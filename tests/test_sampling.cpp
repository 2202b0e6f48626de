// sample_token draws in proportion to softmax(logits / temperature), within
// top_k and the top_p nucleus: checked by counting many draws against the
// exact probabilities (4.5 standard deviations, so a correct sampler fails
// about once in 10^5 runs; a wrong weight, block or nucleus by far more).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "apps/recipes/inference.h"
#include "kiln/core/error.h"
#include "models/common/language_model.h"
#include "models/common/sampler_chain.h"
#include "models/hf/sampling_defaults.h"

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

// Draws `n` tokens under `s` and counts each.
std::map<int32_t, int64_t> counts(const std::vector<float>& logits, const models::Sampling& s, int64_t n) {
  Generator gen(11);
  std::map<int32_t, int64_t> c;
  for (int64_t i = 0; i < n; ++i) ++c[models::sample_token(logits, s, gen)];
  return c;
}

TEST(Sampling, MinPKeepsTheTokensAtLeastMinPTimesAsLikelyAsTheMostLikely) {
  // Probabilities 0.50, 0.30, 0.15, 0.05 (at index 1, 3, 0, 2).
  const std::vector<float> logits = {float(std::log(0.15)), float(std::log(0.5)), float(std::log(0.05)),
                                     float(std::log(0.3))};
  const int64_t n = 30000;
  // Over the whole vocabulary (no order needed) and after top-k (sorted): the same.
  for (int64_t top_k : {int64_t(0), int64_t(4)}) {
    // min_p 0.25: a floor of 0.125 keeps three; 0.5: a floor of 0.25 keeps two.
    expect_frequencies(counts(logits, {.temperature = 1, .top_k = top_k, .min_p = 0.25}, n),
                       softmax_over(logits, {1, 3, 0}, 1.0), n);
    expect_frequencies(counts(logits, {.temperature = 1, .top_k = top_k, .min_p = 0.5}, n),
                       softmax_over(logits, {1, 3}, 1.0), n);
    // After temperature, as transformers applies it: at 2, the ratios to the most likely are
    // sqrt(0.6) = 0.77, sqrt(0.3) = 0.55 and sqrt(0.1) = 0.32, so 0.5 keeps three.
    expect_frequencies(counts(logits, {.temperature = 2, .top_k = top_k, .min_p = 0.5}, n),
                       softmax_over(logits, {1, 3, 0}, 2.0), n);
    // 1: the most likely alone, at any temperature (greedy).
    expect_frequencies(counts(logits, {.temperature = 3, .top_k = top_k, .min_p = 1.0}, n), {{1, 1.0}}, n);
  }
  // After top-p: 0.6 keeps two (0.5 falls short), then min_p 0.7 (a floor of 0.35) the first alone.
  expect_frequencies(counts(logits, {.temperature = 1, .top_p = 0.6, .min_p = 0.7}, n), {{1, 1.0}}, n);
  expect_frequencies(counts(logits, {.temperature = 1, .top_p = 0.6, .min_p = 0.5}, n),
                     softmax_over(logits, {1, 3}, 1.0), n);
  EXPECT_THROW(counts(logits, {.min_p = 1.5}, 1), Error);
}

TEST(Sampling, TheRepetitionPenaltyDividesPositiveLogitsAndMultipliesNegativeOnesOncePerToken) {
  // As transformers' RepetitionPenaltyLogitsProcessor: in f32, each token seen once however often.
  models::TokenPenalties p({.repetition_penalty = 2.0}, 6, std::vector<int32_t>{1, 2, 2, 2}, 4);
  std::vector<float> logits = {3.0f, 3.0f, -3.0f, 0.5f, -0.5f, 7.0f};
  p.apply(logits);
  EXPECT_EQ(logits, (std::vector<float>{3.0f, 1.5f, -6.0f, 0.5f, -0.5f, 7.0f}));
  p.accept(5);  // the completion's tokens count too
  logits = {3.0f, 3.0f, -3.0f, 0.5f, -0.5f, 7.0f};
  p.apply(logits);
  EXPECT_EQ(logits, (std::vector<float>{3.0f, 1.5f, -6.0f, 0.5f, -0.5f, 3.5f}));
  // llama.cpp's repeat_last_n: only the last 2 tokens (2, then 5).
  models::TokenPenalties last({.repetition_penalty = 2.0, .repetition_window = 2}, 6, std::vector<int32_t>{1, 2}, 4);
  last.accept(5);
  logits = {3.0f, 3.0f, -3.0f, 0.5f, -0.5f, 7.0f};
  last.apply(logits);
  EXPECT_EQ(logits, (std::vector<float>{3.0f, 3.0f, -6.0f, 0.5f, -0.5f, 3.5f}));
  // 0: off.
  models::TokenPenalties none({.repetition_penalty = 2.0, .repetition_window = 0}, 6, std::vector<int32_t>{1}, 4);
  logits = {3.0f, 3.0f, -3.0f, 0.5f, -0.5f, 7.0f};
  none.apply(logits);
  EXPECT_EQ(logits[1], 3.0f);
}

TEST(Sampling, PresenceAndFrequencyPenaltiesCountTheCompletionOnly) {
  // OpenAI's: logit - frequency * count - presence, for tokens the completion holds; the prompt's are left alone.
  models::TokenPenalties p({.presence_penalty = 0.5, .frequency_penalty = 0.25}, 4, std::vector<int32_t>{0, 0, 1}, 8);
  for (int32_t t : {1, 2, 2, 2}) p.accept(t);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  p.apply(logits);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 0.25f, -0.25f, 1.0f}));
  // Applied again to fresh logits, the same (no state leaks from one step to the next).
  logits = {1.0f, 1.0f, 1.0f, 1.0f};
  p.apply(logits);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 0.25f, -0.25f, 1.0f}));
}

TEST(Sampling, EachFieldComesFromTheRequestThenTheModelThenTheFallback) {
  models::SamplingFields asked, model;
  asked.temperature = 0.2;
  model.temperature = 0.7, model.top_p = 0.8, model.repetition_penalty = 1.05;
  const models::Sampling s = models::resolve_sampling(asked, model, {.temperature = 1.0, .top_k = 40});
  EXPECT_EQ(s.temperature, 0.2);
  EXPECT_EQ(s.top_p, 0.8);
  EXPECT_EQ(s.repetition_penalty, 1.05);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_EQ(s.min_p, 0.0);
  EXPECT_EQ(models::sampling_fields_text(model), "temperature 0.7, top_p 0.8, repetition_penalty 1.05");
}

TEST(SamplingDefaults, GenerationConfigIsReadAsVllmReadsIt) {
  const auto f = models::generation_config_sampling(
      nlohmann::json::parse(R"({"do_sample": true, "temperature": 0.7, "top_k": 50, "top_p": 0.8,
                                "repetition_penalty": 1.05, "min_p": 0.05, "eos_token_id": [1, 2]})"),
      "generation_config.json");
  EXPECT_EQ(f.temperature, 0.7);
  EXPECT_FALSE(f.top_k);  // transformers' default of 50: not the model's own
  EXPECT_EQ(f.top_p, 0.8);
  EXPECT_EQ(f.min_p, 0.05);
  EXPECT_EQ(f.repetition_penalty, 1.05);
  EXPECT_FALSE(f.repetition_window);  // the whole sequence
  EXPECT_EQ(models::generation_config_sampling(nlohmann::json::parse(R"({"top_k": 20})"), "g").top_k, 20);
  // Values a sampler cannot take name the file.
  for (const char* bad : {R"({"top_p": "high"})", R"({"top_p": 0})", R"({"temperature": -1})",
                          R"({"repetition_penalty": 0})", R"({"top_k": 2.5})"}) {
    try {
      models::generation_config_sampling(nlohmann::json::parse(bad), "DIR/generation_config.json");
      ADD_FAILURE() << bad << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DIR/generation_config.json"), std::string::npos) << e.what();
    }
  }
}

TEST(SamplingDefaults, AGgufFileIsReadAsLlamaCppReadsItAndSurvivesTheRoundTrip) {
  // No penalty_last_n: llama.cpp's 64.
  const auto plain = models::gguf_sampling(nlohmann::json::object(), "f.gguf");
  EXPECT_EQ(plain.repetition_window, 64);
  EXPECT_FALSE(plain.temperature || plain.repetition_penalty);
  // convert_hf_to_gguf.py's keys from a generation_config.json, and back.
  const nlohmann::json g = nlohmann::json::parse(
      R"({"temperature": 0.6, "top_k": 50, "top_p": 0.9, "min_p": 0.1, "repetition_penalty": 1.1, "penalty_last_n": -1,
          "do_sample": true})");
  const nlohmann::json m = models::gguf_sampling_metadata(g);
  EXPECT_EQ(m, nlohmann::json::parse(R"({"general.sampling.temp": 0.6, "general.sampling.top_k": 50,
      "general.sampling.top_p": 0.9, "general.sampling.min_p": 0.1, "general.sampling.penalty_repeat": 1.1,
      "general.sampling.penalty_last_n": -1})"));
  const auto f = models::gguf_sampling(m, "f.gguf");
  EXPECT_EQ(f.top_k, 50);  // llama.cpp takes the file's as written
  EXPECT_EQ(f.repetition_window, -1);
  EXPECT_EQ(f.repetition_penalty, 1.1);
  nlohmann::json back = g;
  back.erase("do_sample");
  EXPECT_EQ(models::generation_config_of_gguf_sampling(m), back);
  EXPECT_TRUE(f.unapplied.empty());
  // llama.cpp's samplers that Kiln does not run are said where the defaults are, when the file turns them on.
  const auto other =
      models::gguf_sampling(nlohmann::json::parse(R"({"general.sampling.temp": 0.6, "general.sampling.mirostat": 2,
          "general.sampling.mirostat_tau": 5.0, "general.sampling.xtc_probability": 0.0})"),
                            "f.gguf");
  EXPECT_EQ(models::sampling_fields_text(other), "temperature 0.6; not applied: general.sampling.mirostat 2");
}

// llama.cpp's sampler chain (llama-server's "samplers"): the tokens a chain can draw, over many draws.
std::set<int32_t> drawn_by_chain(const std::vector<float>& probabilities, const std::vector<std::string>& chain,
                                 const models::Sampling& s, const std::vector<int32_t>& ends = {},
                                 const std::vector<std::string>& bytes = {}) {
  std::vector<float> logits;
  for (float p : probabilities) logits.push_back(std::log(p));
  const models::InfillVocabulary vocabulary{ends, [&](int32_t id) { return bytes.empty() ? "" : bytes[size_t(id)]; }};
  Generator gen(3);
  std::set<int32_t> drawn;
  for (int i = 0; i < 2000; ++i) drawn.insert(models::sample_chain(logits, chain, s, vocabulary, gen));
  return drawn;
}

TEST(SamplerChain, FiltersRunInTheOrderNamedAsLlamaCppRunsThem) {
  const std::vector<float> p = {0.5f, 0.3f, 0.15f, 0.05f};
  models::Sampling s;
  s.top_k = 3, s.top_p = 0.7;
  // top_k 3 first, then the nucleus of the three renormalised (0.53, 0.32: 0.84 >= 0.7)
  EXPECT_EQ(drawn_by_chain(p, {"top_k", "top_p"}, s), (std::set<int32_t>{0, 1}));
  s.top_p = 1, s.min_p = 0.4;  // min-p: at least 0.4 times the most likely's probability
  EXPECT_EQ(drawn_by_chain(p, {"min_p"}, s), (std::set<int32_t>{0, 1}));
  EXPECT_EQ(drawn_by_chain(p, {"top_k"}, s), (std::set<int32_t>{0, 1, 2}));
  s.temperature = 0;  // temperature 0 in the chain keeps the most likely; named nowhere, it does nothing
  EXPECT_EQ(drawn_by_chain(p, {"top_k", "temperature"}, s), (std::set<int32_t>{0}));
  EXPECT_EQ(drawn_by_chain(p, {"top_k", "penalties", "dry"}, s), (std::set<int32_t>{0, 1, 2}));
}

// llama.cpp's infill sampler: the end where its probability is high against the text's; else a token whose
// bytes start another's takes the other's probability, tokens under 0.2 go, and with no text left, the end.
TEST(SamplerChain, InfillEndsOrKeepsTheLikelyTextAsLlamaCppsDoes) {
  const models::Sampling s;
  EXPECT_EQ(drawn_by_chain({0.3f, 0.3f, 0.2f, 0.2f}, {"infill"}, s, {3}), (std::set<int32_t>{3}));
  // "ab" takes "abc"'s probability; the end (1%) stays beside it
  EXPECT_EQ(drawn_by_chain({0.7f, 0.29f, 0.01f}, {"infill"}, s, {2}, {"ab", "abc", ""}), (std::set<int32_t>{0, 2}));
  // ten tokens of 9.8% each: none reaches 0.2, so the end
  std::vector<float> flat(10, 0.098f);
  flat.push_back(0.02f);
  EXPECT_EQ(drawn_by_chain(flat, {"infill"}, s, {10}, {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", ""}),
            (std::set<int32_t>{10}));
}

// llama-server's n_indent, as its editor plugins set it: once a line has ended, a later line that starts with
// less indentation ends the text, its content cut (its indentation kept), one token after llama-server sees it.
class Pieces : public recipes::TextCompletion {
 public:
  explicit Pieces(const recipes::CompletionOptions& o) : TextCompletion(o, 1) {}
  void add(const std::string& piece) {
    const size_t grown_from = text_.size();
    text_ += piece;
    cut_at_limits(grown_from);
  }
  const std::string& text() const { return text_; }
};

TEST(SamplerChain, NIndentEndsTheTextAtALessIndentedLine) {
  recipes::CompletionOptions o;
  o.min_indent = 4;
  Pieces p(o);
  for (const char* piece : {"def f():", "\n", "    return 1", "\n", "  x = 2", "\n", "y"}) {
    p.add(piece);
    if (p.finished()) break;
  }
  EXPECT_TRUE(p.finished());
  EXPECT_EQ(p.text(), "def f():\n    return 1\n  ");
  EXPECT_EQ(p.result().finish_reason, "length");
  Pieces deep(o);  // indented enough: never cut
  for (const char* piece : {"if x:", "\n", "    a", "\n", "    b", "\n", "        c"}) deep.add(piece);
  EXPECT_FALSE(deep.finished());
  o.min_indent = 0;
  Pieces off(o);
  for (const char* piece : {"a", "\n", "b", "\n", "c"}) off.add(piece);
  EXPECT_FALSE(off.finished());
}

}  // namespace
}  // namespace kiln
