// The answers of the generation endpoints, in OpenAI's shapes:
// /v1/completions (text_completion) and /v1/chat/completions
// (chat.completion). A request becomes a job for the model's
// continuous-batching scheduler; the answer is one JSON object when the job
// ends, or server-sent events as its text is made (chunks, the finish
// reason, usage if asked, then [DONE]); and in llama-server's and Ollama's.
#pragma once
#include <httplib.h>

#include <atomic>
#include <string>

#include "apps/recipes/inference.h"
#include "apps/serve/generation.h"
#include "apps/serve/ollama_requests.h"
#include "apps/serve/requests.h"

namespace kiln::serve {

// A served language model, as the answers need it.
struct GenerationTarget {
  std::string name;
  recipes::InferenceModel& model;
  GenerationScheduler& scheduler;
  int64_t timeout_ms;
  std::atomic<int64_t>& next_id;  // answers' ids: cmpl-N, chatcmpl-N
  std::atomic<int>& open_streams;  // streams being written: a stopping server waits for them
};

void answer_completion(const GenerationTarget& target, const CompletionRequest& request, httplib::Response& res);
// llama-server's own POST /completion: {"content", "stop": true, "stop_type", "tokens_predicted", ...}, or
// streamed as {"content", "stop": false} events, the last one the answer's stats (no [DONE]).
void answer_llama_completion(const GenerationTarget& target, const CompletionRequest& request, httplib::Response& res);
// llama-server's POST /infill: its fill-in-the-middle prompt (the model's FIM tokens around the text before and after
// the cursor, other files' chunks first), answered as /completion answers.
void answer_llama_infill(const GenerationTarget& target, const InfillRequest& request, httplib::Response& res);
void answer_chat(const GenerationTarget& target, const ChatRequest& request, httplib::Response& res);
// Anthropic's POST /v1/messages (anthropic_requests.h): the message, or its events; and /v1/messages/count_tokens:
// {"input_tokens"}, the prompt's tokens as the model's template renders it.
void answer_anthropic_messages(const GenerationTarget& target, const ChatRequest& request, httplib::Response& res);
void answer_anthropic_count_tokens(const GenerationTarget& target, const ChatRequest& request, httplib::Response& res);
// OpenAI's POST /v1/responses (responses_requests.h): the response object, or its events.
void answer_openai_responses(const GenerationTarget& target, const ChatRequest& request, httplib::Response& res);
// Ollama's POST /api/chat and /api/generate (ollama_answers.h): the whole answer, or NDJSON lines of it.
void answer_ollama_chat(const GenerationTarget& target, const ChatRequest& request, httplib::Response& res);
void answer_ollama_generate(const GenerationTarget& target, const OllamaGenerateRequest& request,
                            httplib::Response& res);
// POST /apply-template: {"prompt": the conversation as the model's template renders it}, as llama-server answers.
void answer_apply_template(const GenerationTarget& target, const ChatRequest& request, httplib::Response& res);

}  // namespace kiln::serve
