// How a token is drawn from a model's logits, with the knobs transformers'
// generate(), vLLM and llama-server take: repetition penalties on the
// logits, then temperature, top-k, top-p and min-p on their softmax.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/random.h"

namespace kiln::models {

struct Sampling {
  double temperature = 1.0;  // 0: greedy, always the most likely token
  int64_t top_k = 0;         // the k most likely (<= 0: all)
  double top_p = 1.0;        // then the nucleus: the most likely until their mass reaches top_p
  double min_p = 0;          // then those at least min_p times as likely as the most likely
  // transformers' and vLLM's repetition_penalty (llama.cpp's repeat_penalty):
  // a token seen in the last `repetition_window` tokens of prompt and
  // completion (-1: all of them) has its logit divided by it if positive,
  // multiplied if negative.
  double repetition_penalty = 1.0;
  int64_t repetition_window = -1;
  // OpenAI's: each token's logit less frequency_penalty times its count in
  // the completion so far, and presence_penalty if it is there at all.
  double presence_penalty = 0, frequency_penalty = 0;

  bool penalizes() const { return repetition_penalty != 1.0 || presence_penalty != 0 || frequency_penalty != 0; }
};

// Sampling's fields where a source sets them: a request, a command's
// flags, a model's own files (models/hf/sampling_defaults.h).
struct SamplingFields {
  std::optional<double> temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
  std::optional<int64_t> top_k, repetition_window;
  // Samplers the model's files turn on that Kiln does not run ("general.sampling.mirostat 2"):
  // said where the defaults are, so that a file's intent is never dropped without a word.
  std::vector<std::string> unapplied;
};
// Each field from `first` where it sets it, else from `then`; the unapplied of both.
SamplingFields merge_sampling(const SamplingFields& first, const SamplingFields& then);
// Each field from the first source that sets it: `asked`, then the model's
// `defaults`, then `fallback`.
Sampling resolve_sampling(const SamplingFields& asked, const SamplingFields& defaults, Sampling fallback);
// "temperature 0.7, top_k 20, ...": the fields set, by their request names, then
// "; not applied: ..." when some are unapplied ("" if none).
std::string sampling_fields_text(const SamplingFields& f);

// Refuses values no sampler means: a negative temperature, top_p outside
// (0, 1], min_p outside [0, 1], a repetition penalty <= 0, a window < -1.
void check_sampling(const Sampling& s);

// Whether `name` is a llama.cpp sampler that sample_chain (models/common/sampler_chain.h) takes.
bool is_chain_sampler(const std::string& name);

// Samples a token from `logits` [vocab] (penalties already applied).
int32_t sample_token(const std::vector<float>& logits, const Sampling& s, Generator& gen);
int32_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, double top_p, Generator& gen);

// The penalties' memory of one sequence: its prompt, then each token
// accepted. Sized once (the vocabulary, and `most_tokens`: the longest the
// sequence gets, prompt included, as far as 1M), so a step allocates nothing.
class TokenPenalties {
 public:
  TokenPenalties(const Sampling& s, int64_t vocab, std::span<const int32_t> prompt, int64_t most_tokens);
  void accept(int32_t token);
  // The penalties on `logits` [vocab], as vLLM applies them: repetition
  // first, then frequency and presence.
  void apply(std::span<float> logits);

 private:
  Sampling s_;
  std::vector<int32_t> tokens_;  // the prompt, then the completion
  size_t prompt_ = 0;
  std::vector<int32_t> completion_counts_;  // by token
  std::vector<uint32_t> stamp_;             // the step that last penalized each token
  uint32_t step_ = 0;
};

}  // namespace kiln::models
