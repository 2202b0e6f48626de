// A trained model loaded for inference: what `kiln serve` runs. Each recipe
// loads its own kind from a checkpoint (Recipe::load_for_inference).
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/fim.h"
#include "kiln/text/grammar/gbnf.h"
#include "kiln/text/reasoning.h"
#include "kiln/text/tool_calls.h"
#include "models/common/sampling.h"

namespace kiln::nn {
class KvPool;
}

namespace kiln::recipes {

struct CompletionOptions {
  int64_t max_tokens = 64;
  // Not empty: the prompt as these token ids, taken as they are (the text is not encoded).
  std::vector<int32_t> prompt_ids;
  models::Sampling sampling{.temperature = 0.8, .top_k = 40};
  // OpenAI's logit_bias: added to these tokens' logits before the penalties (as vLLM adds it).
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 1;
  std::vector<std::string> stop;  // the completion ends before the first of these
  bool ignore_eos = false;        // never sample the end of text (run to max_tokens or a stop string)
  // The prompt is a conversation rendered by InferenceModel::render_chat: it
  // holds its special tokens already (none are added), and the completion
  // also ends at the chat template's end of turn.
  bool chat = false;
  // >= 0: each generated token's log-probability, with this many of the most
  // likely tokens at its position (OpenAI's logprobs / top_logprobs).
  int64_t logprobs = -1;
  // Constrained decoding: only tokens that keep the text inside this
  // grammar are sampled (masked before temperature, top-k and top-p), and
  // the end of text only where the text is a whole match.
  std::shared_ptr<const text::Grammar> grammar;
  // Not empty: the grammar applies only from where the text first holds
  // one of these (a tool call's opening, in tool_choice auto: the model
  // chooses whether to call, and a call it makes is valid).
  std::vector<std::string> grammar_triggers;
  // The grammar writes tool calls (a forced call's), not the answer's content.
  bool grammar_writes_calls = false;
  // A chat whose answer may reason first, in these marks (`reasoning_open`:
  // the prompt opened them): the trigger is looked for after the reasoning
  // only, so that thinking about a call does not start one.
  const text::ReasoningFormat* reasoning = nullptr;
  bool reasoning_open = false;
  // A chat with tools: the special tokens of the model's tool-call format
  // ([TOOL_CALLS], [ARGS]...) stay in the text, and a grammar may write them.
  // (A chat's reasoning marks stay in its text always: its reader splits them off.)
  bool keep_tool_tokens = false;
  // llama-server's code-completion limits (llama.vscode and llama.vim set them): once a line has been
  // written, a later line that starts with less indentation than min_indent ends the text (that line's
  // content cut), and after max_predict_ms of generating, a line's end does. 0: none.
  int64_t min_indent = 0, max_predict_ms = 0;
  // Not empty: llama-server's "samplers", the sampler chain in this order (models/common/sampler_chain.h).
  std::vector<std::string> sampler_chain;
};

// A token's log-probability under the model (its logits' log-softmax in
// f32, before temperature or truncation): its id, its text, the value.
struct TokenScore {
  int32_t id = -1;
  std::string token;
  std::string bytes;  // `token`'s, or where the token splits a character (`token` is U+FFFD), its own piece of it
  double logprob = 0;
};
// How a model's tokens are named in log-probabilities: their text, and their own bytes.
struct TokenSpelling {
  std::function<std::string(int32_t)> text, bytes;
};
// A generated token's, with the most likely tokens at its position.
struct TokenLogprob : TokenScore {
  std::vector<TokenScore> top;
};

struct Completion {
  std::string text;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // of the prompt, taken from the prefix cache rather than computed
  std::string finish_reason;  // "stop" (a stop string or end of text) or "length"
  std::string stop_string;    // the stop string that ended it ("" if none did)
  std::vector<TokenLogprob> logprobs;  // one per completion token, when options.logprobs >= 0
};

// The `top` most likely tokens of a row of log-probabilities, most likely
// first, named by `text_of`.
std::vector<TokenScore> most_likely(const float* log_probs, size_t vocab, int64_t top, const TokenSpelling& spelling);

// A completion being generated a token at a time, so that a server can
// advance many of them in one batch and let them join and leave between
// steps (continuous batching). Only one thread may use it at a time.
class PendingCompletion {
 public:
  virtual ~PendingCompletion() = default;
  virtual bool finished() const = 0;
  // Text made since the last call that no stop string can still claim.
  virtual std::string take_text() = 0;
  // The whole completion; final once finished().
  virtual const Completion& result() const = 0;
};

// A prompt's own log-probabilities, in the shape of OpenAI's completions
// `logprobs` (what lm-evaluation-harness reads).
struct PromptScores {
  std::string text;                                // the prompt, decoded
  std::vector<std::string> tokens;                 // each token's text
  std::vector<std::optional<double>> token_logprobs;  // [0] has no context: null
  std::vector<std::vector<TokenScore>> top_logprobs;  // the most likely at each position
  std::vector<int64_t> text_offset;                // where each token's text starts
};

// The text side every completion shares: the text made so far, handed out
// only once no stop string can still claim it, and cut at the first stop
// string that appears.
class TextCompletion : public PendingCompletion {
 public:
  // `vocab`: the model's tokens (the options' logit_bias must name some of them).
  TextCompletion(const CompletionOptions& options, int64_t vocab);
  bool finished() const override { return finished_; }
  std::string take_text() override;
  const Completion& result() const override { return c_; }

 protected:
  // The options' logit_bias, added to a step's logits.
  void add_logit_bias(std::span<float> logits) const;
  // Cuts text_ before the first stop string in it and finishes; true if one was.
  bool cut_at_stop();
  // The options' min_indent and max_predict_ms, as llama-server checks them after each token: `grown_from` is
  // text_'s size before the token's text. Finishes ("length") when one ends the text; true if a line was cut.
  bool cut_at_limits(size_t grown_from);
  // Keeps `token`'s log-probability under `logits` (and the most likely
  // alternatives), when the options ask for them.
  void record_logprob(const std::vector<float>& logits, int32_t token, const TokenSpelling& spelling);
  CompletionOptions o_;
  std::string text_;
  bool finished_ = false;
  Completion c_;

 private:
  size_t hold_ = 0;  // characters kept back: the longest stop string, less one
  size_t sent_ = 0;
  bool had_line_end_ = false;  // an earlier token's text held a line's end
  size_t line_start_ = 0;      // where the line min_indent checks starts (0: none yet)
  std::chrono::steady_clock::time_point first_token_;
};

// Rows of ids [B, T] padded with `pad` after each text (encode_texts') -> each row's length: the tokens the model
// reads (at least one a row).
std::vector<int64_t> unpadded_lengths(const Tensor& ids, int64_t pad);

// How an embedding request reads its texts: sentence-transformers' prompt by name before each (none: the
// model's default_prompt_name's), and whether a text past the model's length is cut (false: TextTooLong).
struct EmbeddingInput {
  std::optional<std::string> prompt_name;
  bool truncate = true;
};
// A text longer than the model reads, where the request asked not to cut it (TEI's truncate: false).
struct TextTooLong : Error {
  using Error::Error;
};

class InferenceModel {
 public:
  virtual ~InferenceModel() = default;
  // Classifiers: the class names, in output order.
  virtual std::vector<std::string> labels() const { return {}; }
  // Image classifiers: pixels [N, 1, 28, 28] in [0, 1] -> class probabilities [N, classes].
  virtual Tensor classify_images(const Tensor& pixels);
  // Text classifiers and embedders: texts -> token ids [N, T] (padded), and
  // ids -> class probabilities [N, classes] or embeddings [N, dimensions].
  virtual Tensor encode_texts(const std::vector<std::string>& texts);
  // Embedders: encode_texts as `how` says (this default: the model's own prompt, texts cut, nothing else).
  virtual Tensor encode_embedding_texts(const std::vector<std::string>& texts, const EmbeddingInput& how);
  virtual Tensor classify_tokens(const Tensor& ids);
  virtual Tensor embed_tokens(const Tensor& ids);
  // Text classifiers and embedders: the id that pads token rows (an
  // embedder's is -1, no token: a text may end in its model's pad token).
  // Rows of different lengths padded with it to a common length get the same answers.
  virtual std::optional<int64_t> pad_token() const { return std::nullopt; }
  // Cross-encoders (a classifier with one label: bge-reranker, ms-marco
  // MiniLM): each document's relevance to `query`, the sigmoid of the logit
  // of the pair (query, document) as the tokenizer joins a pair (cut,
  // longest first, at the model's positions), as sentence-transformers'
  // CrossEncoder.predict gives it; and the tokens read.
  struct Relevance {
    std::vector<double> scores;
    int64_t tokens = 0;
  };
  virtual Relevance rerank(const std::string& query, const std::vector<std::string>& documents);
  // Language models: continues `prompt`; `on_text` receives each new piece
  // of text as it is made (for streaming). Runs start_completion and then
  // advance_completions on a batch of one.
  Completion complete(const std::string& prompt, const CompletionOptions& options,
                      const std::function<void(const std::string&)>& on_text);
  // Language models, a token at a time: start_completion runs the prompt and
  // samples the first token; advance_completions gives each unfinished
  // completion of `batch` (all started by this model) one more token, in
  // one batched forward pass. A completion's tokens do not depend on what
  // it is batched with.
  virtual std::unique_ptr<PendingCompletion> start_completion(const std::string& prompt,
                                                              const CompletionOptions& options);
  // Several at once (completions joining a running batch together): their
  // prompts run in one batched forward pass where the model can; by
  // default, start_completion for each.
  virtual std::vector<std::unique_ptr<PendingCompletion>> start_completions(
      const std::vector<std::string>& prompts, const std::vector<CompletionOptions>& options);
  virtual void advance_completions(const std::vector<PendingCompletion*>& batch);
  // Language models: the log-probability of each token of the prompt (text,
  // or `ids` when given) after those before it, and the `top` most likely tokens.
  virtual PromptScores score_prompt(const std::string& prompt, const std::optional<std::vector<int32_t>>& ids,
                                    int64_t top);
  // Chat models: `messages` as the model's chat template spells them, the
  // prompt of a completion with options.chat. A model without a template,
  // or a conversation its template refuses, is a kiln::Error saying why.
  virtual std::string render_chat(const std::vector<text::ChatMessage>& messages);
  // The same for messages as the chat API carries them (tool calls, tool
  // results), with the request's tools (null: none) and more template
  // variables (`kwargs`: chat_template_kwargs, Qwen3's enable_thinking). By
  // default, plain messages through render_chat, and no tools or variables.
  virtual std::string render_chat_json(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                       const nlohmann::ordered_json& kwargs);
  std::string render_chat_json(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools) {
    return render_chat_json(messages, tools, nlohmann::ordered_json::object());
  }
  // Chat models: how their template spells tool calls (null: in no format Kiln reads).
  virtual const text::ToolCallFormat* tool_call_format() const { return nullptr; }
  // Chat models: the marks their template puts around reasoning (null: none).
  virtual const text::ReasoningFormat* reasoning_format() const { return nullptr; }
  // Language models: the pool of pages their completions' caches share
  // (null before the first), whose counters /metrics shows.
  virtual const nn::KvPool* kv_pool() const { return nullptr; }
  // Language models' tokens, as /tokenize and /detokenize give them: `text`
  // as ids (`add_special`: with what the tokenizer adds to a prompt, such as
  // a bos; `parse_special`: special tokens' spellings read as those tokens,
  // else as text), ids as text (special tokens' own text included), and the
  // longest sequence the model takes.
  virtual std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special);
  // A code model's fill-in-the-middle tokens (none by default).
  virtual text::FimTokens fim_tokens() const { return {}; }
  virtual std::string detokenize(const std::vector<int32_t>& ids);
  virtual int64_t context_length() const;
  // Each token's share of detokenize(ids), as streaming decoding hands it
  // out (the pieces join to the whole text; a token that ends inside a
  // character gets "", the next the character). By default, each token's
  // text after the few before it.
  virtual std::vector<std::string> token_pieces(const std::vector<int32_t>& ids);
  // vLLM's GET /tokenizer_info, which lm-evaluation-harness reads to use the
  // server's tokenizer: the special tokens' text (null where none) and the
  // chat template's Jinja source (null for none), the context length.
  virtual nlohmann::json tokenizer_info() const;
  // The model's own sampling defaults (a Hugging Face folder's
  // generation_config.json, a GGUF file's general.sampling.*), for what a
  // request leaves out.
  virtual models::SamplingFields sampling_defaults() const { return {}; }
  // Where a request leaves them out: the model's own stop strings, and the
  // system message a conversation without one opens with (an Ollama
  // Modelfile's PARAMETER stop and SYSTEM).
  virtual std::vector<std::string> default_stop() const { return {}; }
  virtual std::string default_system() const { return ""; }
};

}  // namespace kiln::recipes
