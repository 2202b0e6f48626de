// Ollama's API requests (`ollama serve`'s /api/chat, /api/generate,
// /api/embed and /api/embeddings), read into the OpenAI endpoints' requests
// so that clients written for Ollama (its Python and JavaScript libraries,
// Open WebUI, Continue) run on kiln serve. Each is translated into the
// OpenAI body that asks the same and read by that endpoint's parser.
#pragma once
#include <string>

#include "apps/serve/requests.h"

namespace kiln::serve {

// POST /api/chat: {"model", "messages" ({"role", "content", "thinking",
// "tool_calls": [{"function": {"name", "arguments": {...}}}], "tool_name"};
// images refused: Kiln serves text models), "tools", "format" ("json" or a
// JSON schema), "options", "stream" (true unless false), "think" (false:
// the template's enable_thinking off), "keep_alive"}. options: temperature,
// top_k, top_p, min_p, seed, stop, num_predict (-1: up to 4,096 tokens),
// repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty; the
// runner's (num_ctx, num_thread, num_gpu, ...) are taken and change nothing;
// samplers Kiln has not (mirostat, typical_p, tfs_z) are refused unless off.
ChatRequest parse_ollama_chat(const std::string& body);

// POST /api/generate: {"model", "prompt", "system", "raw", and /api/chat's
// "format", "options", "stream", "think", "keep_alive"}. Without raw the
// prompt is a user message (after the system one) through the model's chat
// template, as Ollama templates it; with raw it is the prompt as it is.
struct OllamaGenerateRequest {
  ChatRequest chat;    // the conversation (its fields are the request's)
  bool raw = false;    // the prompt as it is, not templated
  std::string prompt;  // raw's
};
OllamaGenerateRequest parse_ollama_generate(const std::string& body);

// POST /api/embed: {"model", "input" (a text or texts), "truncate", "dimensions", "options", "keep_alive"};
// POST /api/embeddings (the older one): {"model", "prompt"}.
EmbeddingsRequest parse_ollama_embed(const std::string& body, bool older);

}  // namespace kiln::serve
