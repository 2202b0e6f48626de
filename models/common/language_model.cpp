#include "models/common/language_model.h"

#include <algorithm>
#include <cmath>
#include <limits>


namespace kiln::models {

int32_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, double top_p,
                     Generator& gen) {
  KILN_CHECK(!logits.empty(), "sampling needs at least one logit");
  KILN_CHECK(temperature >= 0, "sampling temperature must be >= 0 (0: greedy), got ", temperature);
  KILN_CHECK(top_p > 0 && top_p <= 1, "top_p must be in (0, 1], got ", top_p);
  // Temperature 0 is the limit of sharpening: always the most likely token
  // (the first of equals), as OpenAI's API and every evaluation harness mean it.
  if (temperature == 0) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if ((top_k <= 0 || size_t(top_k) >= logits.size()) && top_p >= 1) {
    // The whole vocabulary: no order is needed, so none is sorted.
    const float max_logit = *std::max_element(logits.begin(), logits.end());
    std::vector<double> probs(logits.size());
    double total = 0;
    for (size_t i = 0; i < logits.size(); ++i) total += probs[i] = std::exp((logits[i] - max_logit) / temperature);
    const double u = gen.uniform() * total;
    double acc = 0;
    for (size_t i = 0; i < probs.size(); ++i)
      if (u < (acc += probs[i])) return int32_t(i);
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Temperature, then keep the top_k logits, then sample from the softmax.
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
  size_t k = top_k > 0 ? std::min<size_t>(size_t(top_k), order.size()) : order.size();
  std::partial_sort(order.begin(), order.begin() + long(k), order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  double max_logit = logits[order[0]] / temperature, total = 0;
  std::vector<double> probs(k);
  for (size_t i = 0; i < k; ++i) total += probs[i] = std::exp(logits[order[i]] / temperature - max_logit);
  if (top_p < 1) {  // the nucleus: the most likely tokens until their mass reaches top_p
    double mass = 0;
    size_t keep = 0;
    while (keep < k && mass < top_p * total) mass += probs[keep++];
    k = std::max<size_t>(keep, 1);
    total = mass > 0 ? mass : probs[0];
  }
  double u = gen.uniform() * total, acc = 0;
  int32_t next = order[k - 1];
  for (size_t i = 0; i < k; ++i) {
    acc += probs[i];
    if (u < acc) {
      next = order[i];
      break;
    }
  }
  return next;
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
