#include "apps/cli/serve_command.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "apps/cli/quantize_option.h"
#include "apps/recipes/precision.h"
#include "apps/serve/server.h"
#include "kiln/backend/backend.h"
#include "kiln/backend/batch_invariant.h"
#include "kiln/core/units.h"
#include "kiln/text/chat_template.h"

namespace kiln::cli {

void print_line(const std::string& s);

std::function<int()> add_serve_command(CLI::App& app) {
  auto o = std::make_shared<serve::ServeOptions>();
  auto model_specs = std::make_shared<std::vector<std::string>>();
  auto device = std::make_shared<std::string>("cpu");
  auto max_body = std::make_shared<std::string>("8MiB");
  auto* cmd = app.add_subcommand("serve", "serve trained models over HTTP, with dynamic batching");
  cmd->footer(
      "Endpoints: GET /health, /v1/models, /v2/health/ready, /v2/models/NAME, /metrics (Prometheus);\n"
      "POST /v2/models/NAME/infer (KServe v2: Fashion-MNIST images as FP32 [N,1,28,28] in [0,1]),\n"
      "POST /v1/classify ({\"model\", \"input\": \"text\" | [\"texts\"]} -> labels with probabilities),\n"
      "POST /v1/embeddings (OpenAI's: sentence embeddings of a hf:DIR sentence-transformers folder),\n"
      "POST /v1/completions (OpenAI fields and ignore_eos; \"stream\": true sends server-sent events),\n"
      "POST /v1/chat/completions (OpenAI's chat API, in the model's chat template),\n"
      "batched continuously: completions join and leave the running batch between decode steps.\n"
      "Also OpenAI's /v1/responses, Anthropic's /v1/messages, Ollama's /api/*, llama-server's /completion,\n"
      "/infill and /embedding, and TEI's /embed and /rerank (docs/SERVING.md lists them all).\n"
      "GET / is a page to try the models and watch the runs under --runs train.\n"
      "Example: kiln serve --model mlp=runs/fashion-mlp --model gpt=runs/fortunes-gpt --port 8080");
  cmd->add_option("--model", *model_specs, "NAME=RUN_DIR (a run or checkpoint directory); repeat for more");
  cmd->add_option("--host", o->host, "address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", o->port, "port (default 8080)")->check(CLI::Range(1, 65535));
  cmd->add_option("--device", *device, "cpu, cuda or cuda:N");
  cmd->add_option("--max-batch", o->batching.max_batch,
                  "rows per batch on the device; for language models, completions per decode step (default 32)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-delay-us", o->batching.max_delay_us,
                  "how long a request may wait for others to batch with (default 2000)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-queue", o->batching.max_queue, "requests waiting per model (language models: waiting or running); more get 503 (default 512)")
      ->check(CLI::PositiveNumber);
  add_quantize_option(cmd, o->loading.quantize,
                      "quantize Hugging Face language models' weights: int8 (per output channel), int4 (groups of "
                      "32) or int4z (with zero points)");
  cmd->add_option("--chat-template", o->loading.chat_template,
                  "the chat template of every Hugging Face language model, instead of its folder's: " + text::chat_template_list());
  cmd->add_option("--max-body", *max_body, "largest request body; larger get 413 (default 8MiB)");
  cmd->add_option("--warmup", o->warmup_batches,
                  "full batches to run through each model before /health says ready (default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--runs", o->runs_dir, "a directory of run directories whose curves the page at / plots");
  cmd->add_option("--http-threads", o->http_threads, "connections served at once (default 256)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--request-timeout-ms", o->request_timeout_ms, "answer 504 after this long (default 30000)")
      ->check(CLI::PositiveNumber);
  auto threads = std::make_shared<int>(0);
  cmd->add_option("--threads", *threads,
                  "CPU threads a batch's ops run on (default: OMP_NUM_THREADS, or all cores); fewer leave "
                  "cores to the HTTP work, and to a load generator on the same machine")
      ->check(CLI::NonNegativeNumber);
  auto precision = std::make_shared<std::string>("fp32");
  cmd->add_option("--precision", *precision,
                  "fp32, or bf16: run the models under bf16 autocast (faster on GPUs and on CPUs with bf16 "
                  "instructions)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  auto invariant = std::make_shared<bool>(false);
  auto api_keys = std::make_shared<std::vector<std::string>>();
  auto api_key_file = std::make_shared<std::string>();
  cmd->add_option("--api-key", *api_keys,
                  "require this key on every request but the health probes and the page (Authorization: Bearer "
                  "KEY, or x-api-key: KEY); repeat for more; KILN_API_KEY sets one too");
  cmd->add_option("--api-key-file", *api_key_file, "the keys --api-key takes, one a line");
  cmd->add_option("--cors-origins", o->cors_origins,
                  "web pages whose scripts may call the server: localhost (pages from this machine, the default), "
                  "* (any), a comma-separated list of origins, or \"\" (none)");
  cmd->add_flag("--batch-invariant", *invariant,
                "give each request the same bits whatever it is batched with (fixed-order products and "
                "attention; slower, CPU only; docs/SERVING.md)");
  return [=]() -> int {
    if (!*cmd) return -1;
    for (const std::string& spec : *model_specs) {
      const size_t eq = spec.find('=');
      KILN_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(), "--model takes NAME=RUN_DIR, got '",
                 spec, "'");
      o->models.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
    }
    o->device = Device::parse(*device);
    if (*threads > 0) set_num_threads(*threads);
    o->precision = *precision == "bf16" ? DType::bf16 : DType::f32;
    if (o->precision == DType::bf16 && recipes::bf16_falls_back_to_fp32(o->device, print_line, "serving"))
      o->precision = DType::f32;
    if (*invariant) {
      KILN_CHECK(o->device.type == DeviceType::cpu, "--batch-invariant runs on the CPU: the CUDA backend has no "
                 "batch-invariant kernels yet; serve with --device cpu, or without --batch-invariant");
      set_batch_invariant(true);
      print_line("batch-invariant: a request gets the same bits whatever it is batched with (fixed-order products "
                 "and attention, at a cost in throughput)");
    }
    o->max_body_bytes = size_t(parse_bytes(*max_body));
    o->api_keys = *api_keys;
    if (const char* key = std::getenv("KILN_API_KEY"); key && *key) o->api_keys.emplace_back(key);
    if (!api_key_file->empty()) {
      std::ifstream in(*api_key_file);
      KILN_CHECK(in, "--api-key-file: cannot read ", *api_key_file);
      for (std::string key; in >> key;) o->api_keys.push_back(key);  // (a key holds no blanks: one a line)
    }
    for (const std::string& key : o->api_keys)
      KILN_CHECK(!key.empty() && key.find_first_of(" \t\r\n") == std::string::npos,
                 "an API key must be non-empty and hold no spaces or line breaks");
    if (!o->api_keys.empty())
      print_line("requests need an API key (" + std::to_string(o->api_keys.size()) +
                 " accepted); /health and / do not");
    return serve::run_server(*o, print_line);
  };
}

}  // namespace kiln::cli
