#include "models/common/language_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::models {

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
                              const Sampling& sampling, Generator& gen, const std::vector<int32_t>& stop_ids,
                              const std::function<bool(int32_t)>& on_token, const std::vector<int32_t>& banned_ids) {
  KILN_CHECK(!tokens.empty(), "generate needs at least one prompt token");
  KILN_CHECK(int64_t(tokens.size()) <= model.context_length(), "the prompt holds ", tokens.size(),
             " tokens, more than the model's context of ", model.context_length(), "; shorten it");
  NoGradGuard ng;
  const Device device = model.parameters().front().device();
  KvCache cache = model.new_cache();
  TokenPenalties penalties(sampling, model.vocab_size(), tokens, model.context_length());
  std::vector<int64_t> feed(tokens.begin(), tokens.end());
  for (int64_t step = 0; step < max_new_tokens && int64_t(tokens.size()) < model.context_length(); ++step) {
    Tensor ids = Tensor::from_vector(feed, {1, int64_t(feed.size())}).to(device);
    std::vector<float> logits = model.forward_cached(ids, cache).to_vector<float>();
    penalties.apply(logits);
    for (int32_t banned : banned_ids)
      if (banned >= 0 && size_t(banned) < logits.size()) logits[size_t(banned)] = -std::numeric_limits<float>::infinity();
    const int32_t next = sample_token(logits, sampling, gen);
    tokens.push_back(next);
    penalties.accept(next);
    feed.assign(1, next);
    if (on_token && !on_token(next)) break;
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
  }
  return tokens;
}

}  // namespace kiln::models
