// A language model with its tokenizer, named as users name one: a run
// directory (or checkpoint) of Kiln's GPT recipe, or "hf:DIR", a Hugging Face
// folder. What `kiln tokenize`, `kiln score` and `kiln sample` run.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "models/common/language_model.h"

namespace kiln::recipes {

struct TextModel {
  std::shared_ptr<models::LanguageModel> model;
  // The ids `tokenizer(text)` gives (with the special tokens it adds); for a
  // Kiln run, the end-of-text id that starts every document, then the text.
  std::function<std::vector<int32_t>(const std::string&)> encode;
  std::function<std::string(const std::vector<int32_t>&)> decode;
  std::vector<int32_t> stop_ids;  // generation ends after one of these
  models::SamplingFields sampling_defaults;  // the model's own (a Hugging Face folder's or GGUF file's)
};

// `weights`: "auto" keeps a Hugging Face file's dtype (bf16 stays bf16);
// "fp32" or "bf16" converts. Kiln runs keep what they saved.
// `quantize`: "", or int8, int8b, int4, int4z: the weights quantized for inference.
TextModel load_text_model(const std::string& spec, Device device, const std::string& weights = "auto",
                          const std::string& quantize = "");
// "auto" -> nullopt, "fp32" -> f32, "bf16" -> bf16; anything else is an error.
std::optional<DType> weights_dtype(const std::string& precision);

// The log-probability of each token given those before it, from one
// forward pass: logprobs[0] has no context and is left out (NaN).
struct ScoredText {
  std::vector<int32_t> ids;
  std::vector<double> logprobs;  // ids.size() entries; [0] is NaN
  double perplexity = 0;         // exp(-mean of logprobs[1:])
};
ScoredText score_text(TextModel& model, const std::string& text);

// llama.cpp's llama-perplexity, for comparing with it: the whole text
// tokenized once (BOS first, where the tokenizer adds one), cut into chunks
// of `ctx` tokens (the last partial one left out; at most `chunks` of them when
// > 0), each chunk's first token replaced by BOS, and only the second half of
// each chunk scored, so that every scored token has ctx / 2 tokens before it.
struct ChunkedPerplexity {
  double perplexity = 0, standard_error = 0;  // exp(mean NLL), and its estimated error (llama.cpp's "+/-")
  int64_t chunks = 0, tokens_scored = 0, tokens = 0;
};
ChunkedPerplexity chunked_perplexity(TextModel& model, const std::string& text, int64_t ctx, int64_t chunks = 0);

// A language model on the fortunes validation split (the GPT recipe's): each
// fortune scored on its own with the model's tokenizer, cut to the context.
// Nats per token are the model's own; bits per byte compare any tokenizers.
struct TextEval {
  double nats_per_token = 0, bits_per_byte = 0;
  int64_t documents = 0, tokens = 0;
};
TextEval evaluate_on_fortunes(TextModel& model, const std::string& data_dir = "");

}  // namespace kiln::recipes
