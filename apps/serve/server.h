// `kiln serve`: trained checkpoints over HTTP (design: docs/SERVING.md).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "apps/recipes/recipe.h"
#include "apps/serve/batcher.h"

namespace kiln::serve {

struct ServeOptions {
  std::vector<std::pair<std::string, std::string>> models;  // name -> run or checkpoint directory
  std::string host = "127.0.0.1";
  int port = 8080;
  Device device = Device::cpu();
  BatchOptions batching;
  size_t max_body_bytes = size_t(8) << 20;  // larger bodies get 413
  int64_t request_timeout_ms = 30000;       // a request not answered by then gets 504
  size_t http_threads = 256;                 // connections served at once (each waits on its batch)
  int64_t warmup_batches = 0;                // run through each model before it is ready (--warmup)
  std::string runs_dir;                      // the page plots the runs under it (--runs)
  DType precision = DType::f32;              // bf16: models run under bf16 autocast (--precision)
  recipes::InferenceOptions loading;         // --chat-template and --quantize, for every Hugging Face language model
  // Non-empty: every request but the health probes and the page must carry one of these, as
  // "Authorization: Bearer KEY" (OpenAI's clients, llama-server's, vLLM's) or "x-api-key: KEY" (Anthropic's).
  std::vector<std::string> api_keys;
  // Which web pages' scripts may call the server (CORS): "localhost" pages served from this machine (the
  // default, as Ollama's: a page from elsewhere cannot drive a server on this machine), "*" any (llama-server's
  // and vLLM's default), or a comma-separated list of origins; "" none.
  std::string cors_origins = "localhost";
};

// Serves until SIGTERM or SIGINT, then stops accepting, finishes the
// requests in flight and returns 0. `log` gets one line per event.
int run_server(const ServeOptions& options, const recipes::Log& log);

}  // namespace kiln::serve
