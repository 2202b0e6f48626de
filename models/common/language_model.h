// What every causal language model offers generation, whatever its
// architecture (Kiln's GPT, the Llama family, Hugging Face GPT-2): logits of
// new tokens that continue a cache of keys and values.
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include "kiln/nn/kv_cache.h"
#include "kiln/nn/module.h"
#include "models/common/sampling.h"

namespace kiln::models {

// What a training step keeps for backward (kiln/autograd/checkpoint.h):
//  none:      every activation backward needs;
//  selective: the matrix products' outputs; the linears after a layernorm,
//             GELU or the head merge recompute their inputs (cheap ops) in
//             backward instead of keeping them;
//  blocks:    only each block's input; backward re-runs the block.
// Gradients are bitwise the same in all three on the CPU (Kiln's GPT; the
// Llama family has none and blocks).
enum class ActivationCheckpointing { none, selective, blocks };
ActivationCheckpointing parse_activation_checkpointing(const std::string& mode);

// Keys and values of every position a sequence has seen, in pages of the
// model's pool (kiln/nn/kv_cache.h).
using nn::KvCache;

class LanguageModel : public nn::Module {
 public:
  // Logits [1, vocab] of the last of `ids` [1, n], which continue the
  // positions in `cache` (empty: a prompt) and are added to it.
  virtual Tensor forward_cached(const Tensor& ids, KvCache& cache) = 0;
  // An empty cache in this model's pool, holding up to context_length() positions.
  virtual KvCache new_cache() const = 0;
  // Continuous batching: one new token for each of B sequences, each with its
  // own cache, in one forward pass -> logits [B, vocab]; each token joins its
  // cache. The linears see all B rows at once.
  virtual Tensor forward_decode(const std::vector<int32_t>& tokens, const std::vector<KvCache*>& caches) = 0;
  // Prompts of several sequences as one padded batch (batch_prompts below),
  // continuing their caches -> logits [B, vocab] of each one's last token,
  // as forward_cached gives them.
  virtual Tensor forward_prompts(const std::vector<std::vector<int64_t>>& prompts,
                                 const std::vector<KvCache*>& caches) = 0;
  virtual int64_t context_length() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Training: the mean next-token cross-entropy of ids [B, T] against targets [B, T].
  virtual Tensor loss(const Tensor& ids, const Tensor& targets) = 0;
  // The final normed hidden states of ids [B, T] -> [B, T, hidden]: what the
  // head reads, and what a sequence classifier on this model pools.
  virtual Tensor hidden_states(const Tensor& ids) = 0;
  // The same for a padded batch, row b's first lengths[b] tokens real (empty:
  // all): a causal model's real tokens never see the padding after them, so
  // by default the lengths change nothing; a bidirectional one masks it.
  virtual Tensor padded_hidden_states(const Tensor& ids, const std::vector<int64_t>& lengths) {
    (void)lengths;
    return hidden_states(ids);
  }
  virtual void set_activation_checkpointing(ActivationCheckpointing mode) = 0;

  // The pool of the caches made last (null before the first), for its
  // counters: pages held and cached, prefix positions reused.
  const nn::KvPool* kv_pool() const { return kv_pool_.get(); }

  // Kept as well as handed to the layers: checkpointed blocks replay it.
  void use_dropout_generator(const std::shared_ptr<Generator>& gen) override {
    dropout_gen_ = gen;
    nn::Module::use_dropout_generator(gen);
  }

 protected:
  // What every dropout of the model draws from (a Hugging Face model's until
  // a run hands it its own).
  std::shared_ptr<Generator> dropout_gen_ = std::make_shared<Generator>(0);

  // The pool every cache of this model shares, made again when the layout
  // changes (the model moved or changed dtype); caches of the old one keep it alive.
  std::shared_ptr<nn::KvPool> pool_for(const nn::KvLayout& layout) const;

 private:
  mutable std::shared_ptr<nn::KvPool> kv_pool_;
};

// Prompts of several sequences as one padded batch [B, T] (forward_prompts'
// input): each cache's new tokens (an empty cache first takes a published
// prefix), each row's padding after them.
struct PromptBatch {
  std::vector<std::vector<int32_t>> fresh;  // the tokens each cache does not hold yet
  std::vector<int64_t> lengths;             // fresh[b].size()
  int64_t T = 0;                            // the longest row
  int64_t furthest = 0;                     // the furthest position any row reaches, plus one
  bool any_past = false;                    // some cache held positions already
  std::vector<int64_t> ids, positions;      // [B * T]: padded with token 0 at positions in range
  std::vector<int64_t> last_rows;           // each row's last real row of [B * T]
};
// The token of ids [1, 1] (i64, on the host, in [0, vocab_size)) that
// continues a cache holding positions already: forward_cached's decoding
// step, run without a prompt batch's bookkeeping. nullopt for anything else.
std::optional<int32_t> one_more_token(const Tensor& ids, const KvCache& cache, int64_t vocab_size);
// Refuses an empty prompt, and one that takes its cache past `context` positions.
PromptBatch batch_prompts(const std::vector<std::vector<int64_t>>& prompts, const std::vector<KvCache*>& caches,
                          int64_t context);

// The log-softmax of the logits at every position of `ids` (one forward
// pass, no gradients), in f32 whatever the model's dtype, as evaluation
// harnesses compute it (logits.float()): [ids.size() * vocab], row t being
// the distribution of the token after ids[t].
std::vector<float> next_token_log_probabilities(LanguageModel& model, const std::vector<int32_t>& ids);

// Appends up to max_new_tokens tokens to `prompt`, each from sample_token
// after the penalties (temperature 0: greedy). Stops after a token in `stop_ids`, or when
// `on_token` returns false, or at the context length. Tokens in
// `banned_ids` are never sampled (llama.cpp's --ignore-eos bans the eos).
std::vector<int32_t> generate(LanguageModel& model, std::vector<int32_t> prompt, int64_t max_new_tokens,
                              const Sampling& sampling, Generator& gen, const std::vector<int32_t>& stop_ids = {},
                              const std::function<bool(int32_t)>& on_token = {},
                              const std::vector<int32_t>& banned_ids = {});

}  // namespace kiln::models
