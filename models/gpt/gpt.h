// A GPT language model with the GPT-2 architecture (pre-norm blocks, learned
// positions, GELU MLP, tied input/output embeddings) and GPT-2's parameter
// names as nanoGPT spells them ("transformer.h.0.attn.c_attn.weight"), so
// weights map one-to-one onto PyTorch implementations.
#pragma once
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>

#include "kiln/nn/attention.h"
#include "models/common/language_model.h"

namespace kiln::models {

struct GptConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;  // after attention's and the MLP's output projections; on the embeddings too unless:
  std::optional<double> embedding_dropout;  // GPT-2's embd_pdrop
  double attention_dropout = 0.0;           // on the attention probabilities: GPT-2's attn_pdrop

  nlohmann::json to_json() const;
  static GptConfig from_json(const nlohmann::json& j);
};


// GPT-2's initialisation of every weight of `model` (also used by the text classifier).
void gpt2_init(nn::Module& model, const GptConfig& c, Generator& gen);


class GptBlock : public nn::Module {
 public:
  GptBlock(const GptConfig& c, Generator& init, std::shared_ptr<Generator> dropout_gen);
  Tensor forward(const Tensor& x) override;
  // Inference over a paged cache (CausalSelfAttention::forward_paged).
  Tensor forward_paged(const Tensor& x, const nn::PagedStep& step, int64_t layer, const nn::RealRows& real,
                       bool read_pages);
  bool selective = false;  // selective activation checkpointing
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<nn::CausalSelfAttention> attn;
  std::shared_ptr<nn::Module> mlp;
};

class Gpt : public LanguageModel {
 public:
  Gpt(const GptConfig& config, Generator& init, std::shared_ptr<Generator> dropout_gen);
  // ids [B, T] (i64) -> logits [B, T, vocab]
  Tensor hidden_states(const Tensor& ids) override { return ln_f_->forward(final_stream(ids)); }
  Tensor forward(const Tensor& ids) override;
  // Mean next-token cross-entropy of forward(ids) against targets [B, T]
  // (through linear_cross_entropy: the logits are never held whole).
  // Appends max_new_tokens sampled tokens to `prompt` (temperature 0: greedy;
  // top_k <= 0 means the whole vocabulary).
  // top_p < 1 keeps the smallest set of the top_k tokens whose probability
  // reaches top_p (nucleus sampling). `on_token` sees each new token and may
  // end generation early by returning false.
  std::vector<int32_t> generate(std::vector<int32_t> prompt, int64_t max_new_tokens, double temperature,
                                int64_t top_k, Generator& gen, double top_p = 1.0,
                                const std::function<bool(int32_t)>& on_token = {});
  const GptConfig& config() const { return config_; }
  // Generation: logits [1, vocab] of the last of `ids` [1, n], which continue
  // the positions in `cache` (empty: a prompt) and are added to it. Each new
  // token costs one position, not the whole context.
  Tensor forward_cached(const Tensor& ids, KvCache& cache) override;
  KvCache new_cache() const override;
  int64_t context_length() const override { return config_.block_size; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  // Prompts of several sequences in one forward pass (rows padded to the
  // longest; causal, so padding changes no answer): each of `prompts`
  // continues its cache (an empty one first takes a published prefix);
  // logits [B, vocab] of each prompt's last token, as forward_cached gives
  // for that prompt alone.
  Tensor forward_prompts(const std::vector<std::vector<int64_t>>& prompts,
                         const std::vector<KvCache*>& caches) override;
  // Continuous batching: one new token for each of B sequences, each with
  // its own cache (length < block_size), in one forward pass -> logits
  // [B, vocab]; each token is added to its cache. The linears see all B
  // rows at once, so a step for B sequences costs far less than B steps.
  Tensor forward_decode(const std::vector<int32_t>& tokens, const std::vector<KvCache*>& caches) override;
  Tensor loss(const Tensor& ids, const Tensor& targets) override;
  void set_activation_checkpointing(ActivationCheckpointing mode) override;

  // Pipeline parallelism: blocks [first, last), after the embeddings when
  // first == 0 and before ln_f, the tied head and the loss when last ==
  // n_layer. `in`: ids [B, T] on the first stage, else the residual stream
  // [B, T, C]. Returns the stream after block last-1, or on the last stage
  // the mean next-token loss against `targets`, as loss() computes it.
  Tensor stage_forward(const Tensor& in, const Tensor& targets, int64_t first, int64_t last);
  // The names of the parameters stage [first, last) uses, in model order
  // (the first and last stage share the tied embedding).
  std::vector<std::string> stage_parameter_names(int64_t first, int64_t last) const;

 private:
  Tensor embed(const Tensor& ids);                                   // token + position embeddings
  Tensor run_blocks(Tensor x, int64_t first, int64_t last);          // the residual stream through blocks [first, last)
  Tensor final_stream(const Tensor& ids) { return run_blocks(embed(ids), 0, config_.n_layer); }
  Tensor head(const Tensor& x) const;                                 // logits from the tied embedding
  // One new token for each of the caches (forward_decode, and forward_cached's one more token).
  Tensor decode_step(std::span<const int32_t> tokens, std::span<KvCache* const> caches);
  GptConfig config_;
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Sequential> h_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::Dropout> drop_;
  std::vector<std::shared_ptr<GptBlock>> blocks_;
  ActivationCheckpointing checkpointing_ = ActivationCheckpointing::none;
};

}  // namespace kiln::models
