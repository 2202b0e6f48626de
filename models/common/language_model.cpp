#include "models/common/language_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/core/fast_exp.h"

namespace kiln::models {

namespace {

// Each token's weight exp((logit - max) / temperature) in f32, on
// fast_exp so the loop vectorises: libm's exp in f64 over a 49K vocabulary
// took 0.4 ms a token, 4% of a served decoding step. With `only`, the
// weights of those `count` ids alone (top-k reads no others; the rest of
// the buffer is stale): over a 152K vocabulary the whole loop is ~0.23 ms
// a token. The buffer is kept per thread, so a step allocates nothing.
const std::vector<float>& token_weights(const std::vector<float>& logits, double temperature,
                                        const int32_t* only = nullptr, size_t count = 0) {
  thread_local std::vector<float> weights;
  weights.resize(logits.size());
  const float* l = logits.data();
  float max_logit = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max_logit)
  for (size_t i = 0; i < logits.size(); ++i) max_logit = l[i] > max_logit ? l[i] : max_logit;  // (std::max does not vectorise)
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

int32_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, double top_p,
                     Generator& gen) {
  KILN_CHECK(!logits.empty(), "sampling needs at least one logit");
  KILN_CHECK(temperature >= 0, "sampling temperature must be >= 0 (0: greedy), got ", temperature);
  KILN_CHECK(top_p > 0 && top_p <= 1, "top_p must be in (0, 1], got ", top_p);
  auto most_likely = [&] { return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()); };
  // Temperature 0 is the limit of sharpening: always the most likely token
  // (the first of equals), as OpenAI's API and every evaluation harness mean it.
  if (temperature == 0) return most_likely();
  const size_t n = logits.size();
  const bool whole = top_k <= 0 || size_t(top_k) >= n;
  if (whole && top_p >= 1) {  // the whole vocabulary: no order is needed, so none is sorted
    const int32_t drawn = draw_from_all(token_weights(logits, temperature), gen);
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
  size_t k = whole ? std::min<size_t>(n, 64) : size_t(top_k);
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
  double u = gen.uniform() * total, acc = 0;
  for (size_t i = 0; i < k; ++i)
    if (u < (acc += double(weights[size_t(order[i])]))) return order[i];
  return order[k - 1];
}

ActivationCheckpointing parse_activation_checkpointing(const std::string& mode) {
  if (mode == "none") return ActivationCheckpointing::none;
  if (mode == "selective") return ActivationCheckpointing::selective;
  if (mode == "blocks") return ActivationCheckpointing::blocks;
  KILN_FAIL("unknown activation checkpointing '", mode, "' (choose one of none, selective, blocks)");
}

std::shared_ptr<nn::KvPool> LanguageModel::pool_for(const nn::KvLayout& layout) const {
  const bool same = kv_pool_ && kv_pool_->layout().layers == layout.layers &&
                    kv_pool_->layout().kv_heads == layout.kv_heads && kv_pool_->layout().head_dim == layout.head_dim &&
                    kv_pool_->layout().dtype == layout.dtype && kv_pool_->layout().device == layout.device &&
                    kv_pool_->layout().page_size == layout.page_size;
  if (!same) kv_pool_ = std::make_shared<nn::KvPool>(layout);
  return kv_pool_;
}

std::optional<int32_t> one_more_token(const Tensor& ids, const KvCache& cache, int64_t vocab_size) {
  if (ids.numel() != 1 || cache.length() == 0 || ids.device() != Device::cpu() || ids.dtype() != DType::i64)
    return std::nullopt;
  const int64_t id = ids.data<int64_t>()[0];
  if (id < 0 || id >= vocab_size) return std::nullopt;  // the prompt path says what is wrong
  return int32_t(id);
}

PromptBatch batch_prompts(const std::vector<std::vector<int64_t>>& prompts, const std::vector<KvCache*>& caches,
                          int64_t context) {
  const int64_t B = int64_t(prompts.size());
  KILN_CHECK(B >= 1 && caches.size() == prompts.size(), "prompts: ", prompts.size(), " prompts for ", caches.size(),
             " caches");
  PromptBatch p;
  std::vector<int64_t> pasts;
  for (int64_t b = 0; b < B; ++b) {
    KvCache& cache = *caches[size_t(b)];
    std::vector<int32_t> tokens(prompts[size_t(b)].begin(), prompts[size_t(b)].end());
    KILN_CHECK(!tokens.empty() && cache.length() + int64_t(tokens.size()) <= context, "prompt ", b, " has ",
               tokens.size(), " tokens after the ", cache.length(), " cached; together at most the model's context of ",
               context);
    if (cache.length() == 0) tokens.erase(tokens.begin(), tokens.begin() + cache.adopt_prefix(tokens));
    pasts.push_back(cache.length());
    p.any_past |= cache.length() > 0;
    p.lengths.push_back(int64_t(tokens.size()));
    p.T = std::max(p.T, p.lengths.back());
    p.furthest = std::max(p.furthest, cache.length() + p.lengths.back());
    p.fresh.push_back(std::move(tokens));
  }
  p.ids.assign(size_t(B * p.T), 0);
  p.positions.assign(size_t(B * p.T), 0);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(p.fresh[size_t(b)].begin(), p.fresh[size_t(b)].end(), p.ids.begin() + b * p.T);
    for (int64_t t = 0; t < p.T; ++t)
      p.positions[size_t(b * p.T + t)] = std::min(pasts[size_t(b)] + t, p.furthest - 1);
    p.last_rows.push_back(b * p.T + p.lengths[size_t(b)] - 1);
  }
  return p;
}

std::vector<float> next_token_log_probabilities(LanguageModel& model, const std::vector<int32_t>& ids) {
  NoGradGuard ng;
  std::vector<int64_t> ids64(ids.begin(), ids.end());
  const Device device = model.parameters().front().device();
  Tensor logits = model.forward(Tensor::from_vector(ids64, {1, int64_t(ids.size())}).to(device));
  return log_softmax(to_dtype(logits, DType::f32), -1).to_vector<float>();
}

std::vector<int32_t> generate(LanguageModel& model, std::vector<int32_t> tokens, int64_t max_new_tokens,
                              double temperature, int64_t top_k, double top_p, Generator& gen,
                              const std::vector<int32_t>& stop_ids, const std::function<bool(int32_t)>& on_token,
                              const std::vector<int32_t>& banned_ids) {
  KILN_CHECK(!tokens.empty(), "generate needs at least one prompt token");
  KILN_CHECK(int64_t(tokens.size()) <= model.context_length(), "the prompt holds ", tokens.size(),
             " tokens, more than the model's context of ", model.context_length(), "; shorten it");
  NoGradGuard ng;
  const Device device = model.parameters().front().device();
  KvCache cache = model.new_cache();
  std::vector<int64_t> feed(tokens.begin(), tokens.end());
  for (int64_t step = 0; step < max_new_tokens && int64_t(tokens.size()) < model.context_length(); ++step) {
    Tensor ids = Tensor::from_vector(feed, {1, int64_t(feed.size())}).to(device);
    std::vector<float> logits = model.forward_cached(ids, cache).to_vector<float>();
    for (int32_t banned : banned_ids)
      if (banned >= 0 && size_t(banned) < logits.size()) logits[size_t(banned)] = -std::numeric_limits<float>::infinity();
    const int32_t next = sample_token(logits, temperature, top_k, top_p, gen);
    tokens.push_back(next);
    feed.assign(1, next);
    if (on_token && !on_token(next)) break;
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
  }
  return tokens;
}

}  // namespace kiln::models
