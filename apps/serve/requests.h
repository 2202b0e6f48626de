// Parsing and checking the bodies kiln serve accepts. Pure functions of the
// body text (no model, no tensors), so the libFuzzer target
// (tests/fuzz/request_fuzzer.cpp) can drive them with arbitrary bytes: each
// either returns a valid request or throws HttpError(400, what is wrong).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/text/chat_template.h"
#include "kiln/text/grammar/gbnf.h"
#include "kiln/text/tool_calls.h"
#include "models/common/sampling.h"

namespace kiln::serve {

// A request the client got wrong: the HTTP status and a message for it.
struct HttpError : std::runtime_error {
  int status;
  HttpError(int s, const std::string& message) : std::runtime_error(message), status(s) {}
};

// KServe v2 infer: one FP32 tensor of Fashion-MNIST images, [N, 1, 28, 28]
// or [N, 784], as JSON numbers or, with the binary tensor data extension
// (what Triton's clients send), as little-endian bytes after a JSON header
// whose length the Inference-Header-Content-Length header gives.
struct InferRequest {
  // An output to answer, in the answer's order: "probabilities" or "label",
  // as JSON data or (binary) as bytes after the answer's JSON header.
  struct Output {
    std::string name;
    bool binary = false;
  };
  int64_t images = 0;
  std::vector<float> pixels;  // images x 784
  std::vector<Output> outputs;  // both, as JSON, unless the request names them or sets binary_data_output
};
InferRequest parse_infer(const std::string& body, int64_t max_batch,
                         std::optional<std::string_view> inference_header_length = {});

// /v1/classify: {"model", "input": "text" | ["texts"]}.
struct ClassifyRequest {
  std::string model;
  std::vector<std::string> texts;
};
ClassifyRequest parse_classify(const std::string& body, int64_t max_batch);
// Hugging Face TEI's POST /predict: {"inputs": a text or texts, "raw_scores" (false), "truncate",
// "truncation_direction", "model" (Kiln's: which classifier, where several are served)}, and the Inference API's
// "parameters": {"top_k"} (huggingface_hub's text_classification); `batch`: inputs was a list (the answer then a
// list of lists). Pairs of texts are refused: Kiln's classifiers read one text.
struct PredictRequest : ClassifyRequest {
  bool batch = false;
  std::optional<int64_t> top_k;  // the best k labels only
};
PredictRequest parse_tei_predict(const std::string& body, int64_t max_batch);

// POST /v1/rerank and /rerank (Jina's and Cohere's API, as vLLM, TEI and
// llama-server take it): {"model", "query", "documents": ["text" |
// {"text"}], "top_n"?, "return_documents"? (true)}.
struct RerankRequest {
  std::string model;  // "": the one text classifier served
  std::string query;
  std::vector<std::string> documents;
  std::optional<int64_t> top_n;  // the best n only
  bool return_documents = true;
  // Hugging Face TEI's /rerank ({"query", "texts", "return_text"}, as llama-server takes it too): answered as
  // TEI answers, a bare array of {"index", "score", "text"}.
  bool tei = false;
};
inline constexpr int64_t kMaxRerankDocuments = 1000;  // Cohere's limit
RerankRequest parse_rerank(const std::string& body);

// vLLM's POST /v1/score (and /score): {"model", "text_1": a text or texts, "text_2": a text or texts} -> each
// pair's relevance: text_1's one text against each of text_2's, or the i-th against the i-th where both are
// lists of one length.
struct ScoreRequest {
  std::string model;  // "": the one text classifier served
  std::vector<std::pair<std::string, std::string>> pairs;
};
ScoreRequest parse_score(const std::string& body);

// /v1/embeddings (OpenAI's): {"model", "input": "text" | ["texts"],
// "encoding_format": "float" | "base64", "dimensions"?, "user"?}. Token-id
// inputs are refused by name; dimensions (at most the model's width, which
// the server checks) keeps the first values, L2-normalised again.
struct EmbeddingsRequest {
  std::string model;  // "": the one text embedder served (TEI's and llama-server's requests name none)
  std::vector<std::string> texts;
  bool base64 = false;  // each embedding as base64 of little-endian f32s (what the openai client asks for)
  std::optional<int64_t> dimensions;
  // After the model (and `dimensions`), as llama.cpp's embd_normalize: -1 none, 0 the largest |x| to 32760,
  // 2 Euclidean, p > 0 the p-norm. OpenAI's answer is the model's own; TEI's and llama-server's normalise.
  int normalization = -1;
  std::optional<std::string> prompt_name;  // sentence-transformers' prompt by name; none: the model's default
  bool truncate = true;  // false: a text past the model's length is an error (TEI's truncate false), not cut
};
inline constexpr int64_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit per request
EmbeddingsRequest parse_embeddings(const std::string& body);
// Hugging Face text-embeddings-inference's /embed: {"inputs", "normalize" (true), "truncate" (false: a text past
// the model's length is an error), "prompt_name", "dimensions"}.
EmbeddingsRequest parse_tei_embed(const std::string& body);
// llama-server's /embedding and /embeddings: {"content" or "input", "embd_normalize" (2)}.
EmbeddingsRequest parse_llama_embedding(const std::string& body);

// What /v1/completions and /v1/chat/completions share: the model, how to
// sample and how to answer.
struct GenerationFields {
  std::string model;
  int64_t max_tokens = 16;
  // What the request sets of temperature, top_k, top_p, min_p and the
  // penalties; the rest come from the model's defaults, then OpenAI's.
  models::SamplingFields sampling;
  std::vector<std::pair<int32_t, float>> logit_bias;  // OpenAI's: added to these tokens' logits
  uint64_t seed = 1;
  // Choices: n completions of the one prompt, the i-th sampled with seed + i
  // (at temperature 0 they agree, as OpenAI's and vLLM's do).
  int64_t n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last event with the usage
  bool ignore_eos = false;     // llama-server's: never sample the end of text
  // llama-server's `grammar` (GBNF) or response_format json_object: the
  // answer is constrained to match it.
  std::shared_ptr<const text::Grammar> grammar;
};

inline constexpr int64_t kMaxChoices = 128;  // OpenAI's bound on n
inline constexpr int64_t kMaxPrompts = 2048;  // a batch's prompts (OpenAI's bound on inputs)
// llama-server's sampling defaults (common_params_sampling's).
inline constexpr models::Sampling kLlamaServerSampling{
    .temperature = 0.8, .top_k = 40, .top_p = 0.95, .min_p = 0.05, .repetition_window = 64};

// /v1/completions: OpenAI's fields.
struct CompletionRequest : GenerationFields {
  // The prompt, or OpenAI's batch of them (an array of strings): each gets n
  // choices, the batch's choices indexed in order (prompt i's j-th: i n + j).
  std::vector<std::string> prompts = {""};
  // Or the prompts as token ids (OpenAI's array of integers, or a batch of
  // them), as lm-evaluation-harness's local-completions sends them; then
  // `prompts` is empty.
  std::vector<std::vector<int32_t>> prompt_ids;
  // echo: each choice's text and log-probabilities start with its prompt's
  // (the first token's log-probability null): with max_tokens 0, a prompt
  // scored alone (lm-evaluation-harness's loglikelihood; `logprobs` most
  // likely tokens at each position). Without echo, `logprobs` asks for the
  // generated tokens'.
  bool echo = false;
  std::optional<int64_t> logprobs;
  // llama-server's /completion and /infill only: its code-completion limits (n_indent, t_max_predict_ms), its
  // sampler order ("samplers"), and the answer's fields to keep ("response_fields": "a/b" takes b of a).
  int64_t n_indent = 0, t_max_predict_ms = 0;
  std::vector<std::string> samplers, response_fields;
  size_t prompt_count() const { return prompt_ids.empty() ? prompts.size() : prompt_ids.size(); }
};
CompletionRequest parse_completion(const std::string& body);
// llama-server's own POST /completion: {"prompt", "n_predict" (-1: up to
// 4,096 tokens), "temperature", "top_k", "top_p", "min_p", "repeat_penalty",
// "repeat_last_n", "presence_penalty", "frequency_penalty", "seed" (-1:
// random), "stop", "stream", "grammar", "json_schema", "ignore_eos",
// "logit_bias", "cache_prompt", "n_keep", and what its editor plugins send:
// "n_indent", "t_max_predict_ms", "samplers", "response_fields", and
// "t_max_prompt_ms", which llama-server itself leaves unread}. Its samplers that Kiln has not
// (mirostat, typical_p, XTC, DRY, ...) are refused by name unless off. What
// it leaves out of sampling comes from the model, then llama-server's
// defaults (kLlamaServerSampling).
CompletionRequest parse_llama_completion(const std::string& body);

// llama-server's POST /infill (what its editor plugins send): /completion's
// fields, with the text before the cursor (input_prefix), after it
// (input_suffix), other files' chunks ({"text", "filename"}: input_extra)
// and an optional prompt that starts the middle.
struct InfillChunk {
  std::string text, filename;
};
struct InfillRequest : CompletionRequest {
  std::string prefix, suffix;
  std::vector<InfillChunk> extra;
  int64_t n_predict = -1;  // as sent: how much context the extra chunks leave for the answer
};
inline constexpr int64_t kMaxInfillChunks = 1000;
InfillRequest parse_llama_infill(const std::string& body);

// /v1/chat/completions: OpenAI's fields. Messages are kept as chat
// templates read them: content parts joined into one string, "developer"
// read as "system", null fields dropped, tool calls' arguments (JSON text
// in the API) parsed into objects where they parse.
struct ChatRequest : GenerationFields {
  ChatRequest() { max_tokens = 1024; }  // a reply ends at its end of turn: the bound is only a backstop
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;  // OpenAI's list of functions; null: none
  text::ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  bool logprobs = false;
  int64_t top_logprobs = 0;
  // chat_template_kwargs (vLLM's and llama-server's): more variables for the
  // template, such as Qwen3's enable_thinking.
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  // llama-server's reasoning_format: "auto" or "deepseek" (the default) split
  // a reasoning model's thinking off into reasoning_content; "none" leaves it in content.
  bool split_reasoning = true;
};
ChatRequest parse_chat(const std::string& body);

// POST /tokenize, as llama-server takes it ({"content", "add_special": false,
// "with_pieces"}) and as vLLM does ({"model", "prompt", "add_special_tokens":
// true}, or a conversation: {"model", "messages", "tools",
// "chat_template_kwargs", "add_special_tokens": false}). Special tokens'
// text is read as those tokens (llama-server's parse_special).
struct TokenizeRequest {
  std::string model;  // "": the one language model served
  std::string text;
  std::optional<ChatRequest> chat;  // a conversation: its prompt as the model's template renders it
  bool add_special = false;         // with the tokens the tokenizer adds to a prompt (a bos)
  bool with_pieces = false;         // each token as {"id", "piece"}
  bool parse_special = true;        // special tokens' spellings read as those tokens (false: as text)
};
TokenizeRequest parse_tokenize(const std::string& body);

// POST /detokenize: {"tokens": [ids], "model"} (llama-server's, vLLM's).
struct DetokenizeRequest {
  std::string model;  // "": the one language model served
  std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize(const std::string& body);

}  // namespace kiln::serve
