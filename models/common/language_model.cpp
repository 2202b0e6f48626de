#include "models/common/language_model.h"

#include <algorithm>

#include "models/gpt/gpt.h"

namespace kiln::models {

std::vector<int32_t> generate(LanguageModel& model, std::vector<int32_t> tokens, int64_t max_new_tokens,
                              double temperature, int64_t top_k, double top_p, Generator& gen,
                              const std::vector<int32_t>& stop_ids, const std::function<bool(int32_t)>& on_token) {
  KILN_CHECK(!tokens.empty(), "generate needs at least one prompt token");
  KILN_CHECK(int64_t(tokens.size()) <= model.context_length(), "the prompt holds ", tokens.size(),
             " tokens, more than the model's context of ", model.context_length(), "; shorten it");
  NoGradGuard ng;
  const Device device = model.parameters().front().device();
  KvCache cache = model.new_cache();
  std::vector<int64_t> feed(tokens.begin(), tokens.end());
  for (int64_t step = 0; step < max_new_tokens && int64_t(tokens.size()) < model.context_length(); ++step) {
    Tensor ids = Tensor::from_vector(feed, {1, int64_t(feed.size())}).to(device);
    const int32_t next = sample_token(model.forward_cached(ids, cache).to_vector<float>(), temperature, top_k, top_p, gen);
    tokens.push_back(next);
    feed.assign(1, next);
    if (on_token && !on_token(next)) break;
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
  }
  return tokens;
}

}  // namespace kiln::models
