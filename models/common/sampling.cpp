#include "models/common/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/fast_exp.h"

namespace kiln::models {

namespace {

// Each token's weight exp((logit - max) / temperature) in f32, on
// fast_exp so the loop vectorises: libm's exp in f64 over a 49K vocabulary
// took 0.4 ms a token, 4% of a served decoding step. With `only`, the
// weights of those `count` ids alone (top-k reads no others; the rest of
// the buffer is stale): over a 152K vocabulary the whole loop is ~0.23 ms
// a token. The buffer is kept per thread, so a step allocates nothing.
std::vector<float>& token_weights(const std::vector<float>& logits, double temperature, const int32_t* only = nullptr,
                                  size_t count = 0) {
  thread_local std::vector<float> weights;
  weights.resize(logits.size());
  const float* l = logits.data();
  float max_logit = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max_logit)
  for (size_t i = 0; i < logits.size(); ++i)
    max_logit = l[i] > max_logit ? l[i] : max_logit;  // (std::max does not vectorise)
  const float inverse_temperature = float(1.0 / temperature);
  float* w = weights.data();
  if (only) {
    for (size_t i = 0; i < count; ++i) w[only[i]] = fast_exp((l[only[i]] - max_logit) * inverse_temperature);
    return weights;
  }
#pragma omp simd
  for (size_t i = 0; i < logits.size(); ++i) w[i] = fast_exp((l[i] - max_logit) * inverse_temperature);
  return weights;
}

// A draw from the whole vocabulary in proportion to `weights`: sums of
// blocks first, so the draw walks the blocks and then one block, not every
// token one after another (a serial chain of additions).
int32_t draw_from_all(const std::vector<float>& weights, Generator& gen) {
  constexpr size_t kBlock = 1024;
  const size_t n = weights.size(), blocks = (n + kBlock - 1) / kBlock;
  thread_local std::vector<double> block_sums;
  block_sums.resize(blocks);
  double total = 0;
  for (size_t b = 0; b < blocks; ++b) {
    double sum = 0;
    const float* w = weights.data() + b * kBlock;
    const size_t m = std::min(kBlock, n - b * kBlock);
#pragma omp simd reduction(+ : sum)
    for (size_t i = 0; i < m; ++i) sum += double(w[i]);
    total += block_sums[b] = sum;
  }
  const double u = gen.uniform() * total;
  double acc = 0;
  for (size_t b = 0; b < blocks; ++b) {
    if (u < acc + block_sums[b]) {
      // Summed in another order than the block's total, the walk may end a
      // rounding short of u: then the block's last token of any weight.
      size_t last = b * kBlock;
      for (size_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
        if (weights[i] > 0) last = i;
        if (u < (acc += double(weights[i]))) return int32_t(i);
      }
      return int32_t(last);
    }
    acc += block_sums[b];
  }
  return -1;  // NaN logits: no draw lands
}

}  // namespace

void check_sampling(const Sampling& s) {
  KILN_CHECK(s.temperature >= 0, "sampling temperature must be >= 0 (0: greedy), got ", s.temperature);
  KILN_CHECK(s.top_p > 0 && s.top_p <= 1, "top_p must be in (0, 1], got ", s.top_p);
  KILN_CHECK(s.min_p >= 0 && s.min_p <= 1, "min_p must be in [0, 1] (0: off), got ", s.min_p);
  KILN_CHECK(s.repetition_penalty > 0 && std::isfinite(s.repetition_penalty),
             "repetition_penalty must be > 0 (1: off), got ", s.repetition_penalty);
  KILN_CHECK(s.repetition_window >= -1, "the repetition window must be -1 (all tokens) or >= 0, got ",
             s.repetition_window);
  KILN_CHECK(std::isfinite(s.presence_penalty) && std::isfinite(s.frequency_penalty),
             "presence_penalty and frequency_penalty must be finite");
}

SamplingFields merge_sampling(const SamplingFields& first, const SamplingFields& then) {
  SamplingFields f = first;
  auto take = [](auto& out, const auto& other) {
    if (!out) out = other;
  };
  take(f.temperature, then.temperature);
  take(f.top_k, then.top_k);
  take(f.top_p, then.top_p);
  take(f.min_p, then.min_p);
  take(f.repetition_penalty, then.repetition_penalty);
  take(f.repetition_window, then.repetition_window);
  take(f.presence_penalty, then.presence_penalty);
  take(f.frequency_penalty, then.frequency_penalty);
  f.unapplied.insert(f.unapplied.end(), then.unapplied.begin(), then.unapplied.end());
  return f;
}

Sampling resolve_sampling(const SamplingFields& asked, const SamplingFields& defaults, Sampling s) {
  auto take = [](const auto& asked_value, const auto& default_value, auto& out) {
    out = asked_value.value_or(default_value.value_or(out));
  };
  take(asked.temperature, defaults.temperature, s.temperature);
  take(asked.top_k, defaults.top_k, s.top_k);
  take(asked.top_p, defaults.top_p, s.top_p);
  take(asked.min_p, defaults.min_p, s.min_p);
  take(asked.repetition_penalty, defaults.repetition_penalty, s.repetition_penalty);
  take(asked.repetition_window, defaults.repetition_window, s.repetition_window);
  take(asked.presence_penalty, defaults.presence_penalty, s.presence_penalty);
  take(asked.frequency_penalty, defaults.frequency_penalty, s.frequency_penalty);
  return s;
}

std::string sampling_fields_text(const SamplingFields& f) {
  std::ostringstream out;
  auto put = [&](const char* name, const auto& v) {
    if (v) out << (out.tellp() > 0 ? ", " : "") << name << " " << *v;
  };
  put("temperature", f.temperature);
  put("top_k", f.top_k);
  put("top_p", f.top_p);
  put("min_p", f.min_p);
  put("repetition_penalty", f.repetition_penalty);
  if (f.repetition_penalty) put("repeat_last_n", f.repetition_window);
  put("presence_penalty", f.presence_penalty);
  put("frequency_penalty", f.frequency_penalty);
  for (size_t i = 0; i < f.unapplied.size(); ++i)
    out << (i > 0 ? ", " : out.tellp() > 0 ? "; not applied: " : "not applied: ") << f.unapplied[i];
  return out.str();
}

bool is_chain_sampler(const std::string& name) {
  static const char* const kNames[] = {"top_k",     "top_p", "min_p",       "temperature", "infill",
                                       "penalties", "dry",   "top_n_sigma", "typ_p",       "xtc"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

int32_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, double top_p,
                     Generator& gen) {
  Sampling s;
  s.temperature = temperature, s.top_k = top_k, s.top_p = top_p;
  return sample_token(logits, s, gen);
}

int32_t sample_token(const std::vector<float>& logits, const Sampling& s, Generator& gen) {
  KILN_CHECK(!logits.empty(), "sampling needs at least one logit");
  check_sampling(s);
  const double temperature = s.temperature, top_p = s.top_p;
  auto most_likely = [&] { return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()); };
  // Temperature 0 is the limit of sharpening: always the most likely token
  // (the first of equals), as OpenAI's API and every evaluation harness mean it.
  if (temperature == 0) return most_likely();
  const size_t n = logits.size();
  const bool whole = s.top_k <= 0 || size_t(s.top_k) >= n;
  if (whole && top_p >= 1) {  // the whole vocabulary: no order is needed, so none is sorted
    std::vector<float>& weights = token_weights(logits, temperature);
    if (s.min_p > 0) {  // min-p alone: a floor under the weights (the most likely one's is 1)
      const float floor = float(s.min_p) * weights[size_t(most_likely())];
      float* w = weights.data();
#pragma omp simd
      for (size_t i = 0; i < n; ++i) w[i] = w[i] >= floor ? w[i] : 0.0f;
    }
    const int32_t drawn = draw_from_all(weights, gen);
    return drawn >= 0 ? drawn : most_likely();
  }
  // top_k reads the weights of its k tokens only: they are computed once those are known.
  const std::vector<float>* weights_read = whole ? &token_weights(logits, temperature) : nullptr;
  // The top_k most likely in order; top_p alone: a head of the order long
  // enough to hold the nucleus, grown 4x until it does (a model's nucleus is
  // a few tokens, so the whole vocabulary is seldom sorted).
  thread_local std::vector<int32_t> order;
  order.resize(n);
  for (size_t i = 0; i < n; ++i) order[i] = int32_t(i);
  auto head_mass = [&](size_t head) {
    double mass = 0;
    for (size_t i = 0; i < head; ++i) mass += double((*weights_read)[size_t(order[i])]);
    return mass;
  };
  double total = 0;
  if (whole)
    for (float w : *weights_read) total += double(w);
  size_t k = whole ? std::min<size_t>(n, 64) : size_t(s.top_k);
  for (;;) {
    std::partial_sort(order.begin(), order.begin() + long(k), order.end(),
                      [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    if (!whole) {
      weights_read = &token_weights(logits, temperature, order.data(), k);
      total = head_mass(k);
      break;
    }
    if (k == n || head_mass(k) >= top_p * total) break;
    k = std::min(n, k * 4);
  }
  const std::vector<float>& weights = *weights_read;
  if (top_p < 1) {  // the nucleus: the most likely tokens until their mass reaches top_p
    double mass = 0;
    size_t keep = 0;
    while (keep < k && mass < top_p * total) mass += double(weights[size_t(order[keep++])]);
    k = std::max<size_t>(keep, 1);
    total = mass > 0 ? mass : double(weights[size_t(order[0])]);
  }
  if (s.min_p > 0) {  // then min-p, as transformers applies it after top-p: the tail below its floor goes
    const double floor = s.min_p * double(weights[size_t(order[0])]);
    while (k > 1 && double(weights[size_t(order[k - 1])]) < floor) --k;
    total = head_mass(k);
  }
  double u = gen.uniform() * total, acc = 0;
  for (size_t i = 0; i < k; ++i)
    if (u < (acc += double(weights[size_t(order[i])]))) return order[i];
  return order[k - 1];
}

TokenPenalties::TokenPenalties(const Sampling& s, int64_t vocab, std::span<const int32_t> prompt, int64_t most_tokens)
    : s_(s) {
  check_sampling(s);
  if (!s.penalizes()) return;
  // (a command's --max-tokens may say more than any sequence reaches: the model's context bounds it)
  tokens_.reserve(std::max(prompt.size(), size_t(std::clamp<int64_t>(most_tokens, 0, int64_t(1) << 20))));
  tokens_.assign(prompt.begin(), prompt.end());
  prompt_ = prompt.size();
  completion_counts_.assign(size_t(vocab), 0);
  stamp_.assign(size_t(vocab), 0);
}

void TokenPenalties::accept(int32_t token) {
  if (!s_.penalizes()) return;
  KILN_CHECK(token >= 0 && size_t(token) < completion_counts_.size(), "token ", token, " is outside the ",
             completion_counts_.size(), "-token vocabulary");
  tokens_.push_back(token);
  ++completion_counts_[size_t(token)];
}

void TokenPenalties::apply(std::span<float> logits) {
  if (!s_.penalizes()) return;
  KILN_CHECK(logits.size() == stamp_.size(), "penalties for a vocabulary of ", stamp_.size(), " given ", logits.size(),
             " logits");
  if (step_ > std::numeric_limits<uint32_t>::max() - 2) std::fill(stamp_.begin(), stamp_.end(), 0), step_ = 0;
  // Each token once, however often it occurs: a stamp per token says this step has seen it.
  auto first_time = [&](int32_t token, uint32_t mark) { return std::exchange(stamp_[size_t(token)], mark) != mark; };
  if (s_.repetition_penalty != 1.0) {
    const uint32_t mark = ++step_;
    const float penalty = float(s_.repetition_penalty);
    const size_t window =
        s_.repetition_window < 0 ? tokens_.size() : std::min(tokens_.size(), size_t(s_.repetition_window));
    for (size_t i = tokens_.size() - window; i < tokens_.size(); ++i) {
      float& l = logits[size_t(tokens_[i])];
      if (first_time(tokens_[i], mark)) l = l < 0 ? l * penalty : l / penalty;
    }
  }
  if (s_.presence_penalty != 0 || s_.frequency_penalty != 0) {
    const uint32_t mark = ++step_;
    const float frequency = float(s_.frequency_penalty), presence = float(s_.presence_penalty);
    for (size_t i = prompt_; i < tokens_.size(); ++i) {
      const int32_t t = tokens_[i];
      if (!first_time(t, mark)) continue;
      logits[size_t(t)] -= frequency * float(completion_counts_[size_t(t)]);
      logits[size_t(t)] -= presence;
    }
  }
}

}  // namespace kiln::models
