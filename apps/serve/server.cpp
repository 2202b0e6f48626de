// The HTTP side of kiln serve: the routes, and which served model answers
// each. Handlers parse and check a request (requests.h and the APIs' own
// *_requests.h), then hand it to its answer with the model it names
// (answers.h: language models' continuous-batching scheduler;
// encoder_answers.h: classifiers', embedders' and rerankers' batchers).
// Models load on a thread after the port is open, so /health can say 503
// until they are ready.
#include "apps/serve/server.h"

#include "apps/serve/access.h"
#include "apps/serve/anthropic_requests.h"
#include "apps/serve/answers.h"
#include "apps/serve/encoder_answers.h"
#include "apps/serve/generation.h"
#include "apps/serve/ollama_answers.h"
#include "apps/serve/page.h"
#include "apps/serve/precision.h"
#include "apps/serve/requests.h"
#include "apps/serve/responses_requests.h"
#include "apps/serve/served_model.h"
#include "apps/serve/tokens.h"

#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "kiln/backend/backend.h"
#include "kiln/backend/factory.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/version.h"
#include "models/hf/hf_model.h"

namespace kiln::serve {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};

// A served model's weights' bytes on disk (Ollama's size): its GGUF file, or its folder's safetensors.
int64_t weights_bytes(const std::string& spec) {
  std::error_code ec;
  const std::filesystem::path path = models::hf_folder(spec).value_or(spec);
  if (std::filesystem::is_regular_file(path, ec)) return int64_t(std::filesystem::file_size(path, ec));
  int64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec))
    if (entry.path().extension() == ".safetensors") total += int64_t(entry.file_size(ec));
  return total;
}

// cpp-httplib 0.11 listens with a backlog of 5: a burst of new connections
// overflows it, and the clients that do not fit wait for their SYN to be
// sent again (1 s, then 3 s). Calling listen() again on the bound socket
// raises the backlog; the socket is found among this process's descriptors.
void raise_listen_backlog(int port) {
  for (int fd = 3; fd < 1024; ++fd) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int listening = 0;
    socklen_t opt_len = sizeof listening;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &opt_len) != 0 || !listening) continue;
    const int bound = addr.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                      : addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                                   : -1;
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
}
extern "C" void on_signal(int) { g_stop = true; }

class Server {
 public:
  Server(const ServeOptions& o, const recipes::Log& log) : o_(o), log_(log) {}

  int run() {
    http_.set_payload_max_length(o_.max_body_bytes);
    // Small JSON answers must not wait for the client's delayed ACK (40 ms).
    http_.set_tcp_nodelay(true);
    http_.set_keep_alive_max_count(100000);
    // A worker per open connection (httplib keeps a keep-alive connection on
    // one worker): concurrent clients can then be batched together.
    const size_t threads = o_.http_threads;
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    routes();
    // Before every route: CORS (a browser's preflight answered here, before any key: it carries none), then the
    // API key.
    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (const std::string origin = allowed_origin(req.get_header_value("Origin"), o_.cors_origins); !origin.empty()) {
        res.set_header("Access-Control-Allow-Origin", origin);
        res.set_header("Access-Control-Allow-Credentials", "true");
        res.set_header("Vary", "Origin");
      }
      if (req.method == "OPTIONS") {
        res.status = 204;
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Headers",
                       asked.empty() ? "Content-Type, Authorization, x-api-key" : asked);
        res.set_header("Access-Control-Max-Age", "600");
        return httplib::Server::HandlerResponse::Handled;
      }
      if (o_.api_keys.empty() || is_public(req) || carries_key(req, o_.api_keys))
        return httplib::Server::HandlerResponse::Unhandled;
      res.status = 401;
      res.set_content(error_body("a valid API key is required (kiln serve --api-key): send it as "
                                 "\"Authorization: Bearer KEY\" or \"x-api-key: KEY\"",
                                 401, req.path),
                      "application/json");
      metrics_.request("unauthorized", 401, 0.0);
      return httplib::Server::HandlerResponse::Handled;
    });
    KILN_CHECK(http_.bind_to_port(o_.host.c_str(), o_.port), "cannot listen on ", o_.host, ":", o_.port,
               " (in use, or not this machine's address): choose another --port or --host");
    raise_listen_backlog(o_.port);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    std::thread loader([&] { load_models(); });
    std::atomic<bool> listening_ended{false};
    std::thread watcher([&] {
      while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      log_("kiln serve: stopping: no new requests; finishing those in flight");
      // cpp-httplib ends a chunked answer once it stops: streams still being
      // written get the request timeout to finish first.
      const auto drain_until = Clock::now() + std::chrono::milliseconds(o_.request_timeout_ms);
      while (open_streams_ > 0 && Clock::now() < drain_until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      // The worker pool drains its queued requests before it ends. stop()
      // does nothing before listen has started, so wait for that first.
      while (!listening_ended && !http_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (!listening_ended) http_.stop();
    });
    std::string where;
    if (const int threads = get_num_threads(); o_.device.is_cpu())
      where = "; models run on " + std::to_string(threads) + (threads == 1 ? " CPU thread" : " CPU threads");
    log_("kiln serve: listening on http://" + o_.host + ":" + std::to_string(o_.port) + where);
    http_.listen_after_bind();
    listening_ended = true;
    g_stop = true;
    watcher.join();
    loader.join();
    for (auto& [name, m] : models_) {
      if (m->batcher) m->batcher->stop();
      if (m->generator) m->generator->stop();
    }
    log_("kiln serve: stopped");
    return load_error_.empty() ? 0 : 1;
  }

 private:
  void load_models() {
    use_num_threads_on_this_thread();  // warm-up batches run here
    for (const auto& [name, dir] : o_.models) {
      try {
        recipes::LoadedModel loaded = recipes::load_for_inference(dir, o_.device, o_.loading);
        auto m = std::make_unique<ServedModel>();
        m->name = name;
        m->dir = dir;
        m->weights_bytes = weights_bytes(dir);
        m->recipe = loaded.recipe;
        m->kind = loaded.kind;
        m->step = loaded.step;
        m->model = with_autocast(std::move(loaded.model), o_.precision);
        recipes::InferenceModel* model = m->model.get();
        if (m->kind == recipes::ModelKind::image_classifier)
          m->batcher = std::make_unique<Batcher>(
              name, o_.batching, [model](const Tensor& rows) { return model->classify_images(rows); }, metrics_);
        if (m->kind == recipes::ModelKind::text_classifier)
          m->batcher = std::make_unique<Batcher>(
              name, o_.batching,
              [model, running = m->running](const Tensor& ids) {
                std::lock_guard<std::mutex> lock(*running);
                return model->classify_tokens(ids);
              },
              metrics_, model->pad_token());
        if (m->kind == recipes::ModelKind::text_embedder)
          m->batcher = std::make_unique<Batcher>(
              name, o_.batching, [model](const Tensor& ids) { return model->embed_tokens(ids); }, metrics_,
              model->pad_token());
        if (m->kind == recipes::ModelKind::language_model)
          m->generator = std::make_unique<GenerationScheduler>(name, *model, o_.batching, metrics_);
        warm_up(name, *model, m->kind);
        log_("kiln serve: loaded " + name + " (" + loaded.recipe + ", step " + std::to_string(loaded.step) + ", " +
             (o_.precision == DType::f32 ? "fp32" : "bf16") + ") from " + dir);
        if (const std::string own = models::sampling_fields_text(model->sampling_defaults()); !own.empty())
          log_("kiln serve: " + name +
               " samples with its own defaults where a request leaves them out (as vLLM and "
               "llama-server do): " +
               own);
        if (const auto stop = model->default_stop(); !stop.empty())
          log_("kiln serve: " + name +
               " stops at its own stop strings where a request gives none: " + nlohmann::json(stop).dump());
        if (!model->default_system().empty())
          log_("kiln serve: " + name + " opens a conversation without a system message with its own (" +
               std::to_string(model->default_system().size()) + " bytes)");
        std::lock_guard<std::mutex> lock(models_mutex_);
        models_[name] = std::move(m);
      } catch (const std::exception& e) {
        log_("kiln serve: error: cannot load model " + name + " from " + dir + ": " + e.what());
        {
          std::lock_guard<std::mutex> lock(models_mutex_);
          load_error_ = std::string("model ") + name + " failed to load: " + e.what();
        }
        g_stop = true;
        return;
      }
    }
    ready_ = true;
  }

  // As Triton's model warmup: full batches through the model before it is
  // called ready, so the first requests do not pay for first-call costs.
  void warm_up(const std::string& name, recipes::InferenceModel& model, recipes::ModelKind kind) {
    if (o_.warmup_batches == 0) return;
    log_("kiln serve: warming up " + name + " (" + std::to_string(o_.warmup_batches) + " batches)");
    const int64_t rows = o_.batching.max_batch;
    for (int64_t i = 0; i < o_.warmup_batches && !g_stop; ++i) {
      if (kind == recipes::ModelKind::image_classifier)
        model.classify_images(Tensor::from_vector(std::vector<float>(size_t(rows) * 784, 0.5f), {rows, 1, 28, 28}));
      if (kind == recipes::ModelKind::text_classifier)
        model.classify_tokens(model.encode_texts(std::vector<std::string>(size_t(rows), "warm up")));
      if (kind == recipes::ModelKind::text_embedder)
        model.embed_tokens(model.encode_texts(std::vector<std::string>(size_t(rows), "warm up")));
      if (kind == recipes::ModelKind::language_model) {
        recipes::CompletionOptions co;
        co.max_tokens = 8;
        model.complete("warm up", co, {});
      }
    }
  }

  ServedModel& model(const std::string& name) {
    if (!ready_) throw HttpError(503, "models are still loading");
    auto it = models_.find(name);
    if (it == models_.end()) {
      std::string known;
      for (const auto& [n, m] : models_) known += (known.empty() ? "" : ", ") + n;
      throw HttpError(404, "unknown model '" + name + "' (loaded: " + known + ")");
    }
    return *it->second;
  }

  // The one model of `kind` served, where a request names none (`what`: that kind, in the plural).
  ServedModel& only_model(recipes::ModelKind kind, const std::string& what) {
    if (!ready_) throw HttpError(503, "models are still loading");
    std::vector<ServedModel*> found;
    for (const auto& [n, m] : models_)
      if (m->kind == kind) found.push_back(m.get());
    if (found.size() != 1)
      throw HttpError(
          400, "name the model: 'model' is missing and " + std::to_string(found.size()) + " " + what + " are served");
    return *found.front();
  }

  // Wraps a handler: JSON errors for HttpError and anything else, metrics for all.
  httplib::Server::Handler handle(const std::string& endpoint, std::function<void(const httplib::Request&,
                                                                                   httplib::Response&)> f) {
    return [this, endpoint, f](const httplib::Request& req, httplib::Response& res) {
      const auto start = Clock::now();
      try {
        f(req, res);
        if (res.status == -1) res.status = 200;  // httplib fills it in after the handler
      } catch (const HttpError& e) {
        res.status = e.status;
        if (e.status == 503) res.set_header("Retry-After", "1");
        res.set_content(error_body(e.what(), e.status, endpoint), "application/json");
      } catch (const std::exception& e) {
        res.status = 500;
        res.set_content(error_body(e.what(), 500, endpoint), "application/json");
      }
      metrics_.request(endpoint, res.status, std::chrono::duration<double>(Clock::now() - start).count());
    };
  }

  // A POST route that reads its own body. Left to cpp-httplib, a body
  // labelled as a form (as `curl -d` labels any body) is parsed as one and
  // refused past 8 KiB with a 413; these endpoints take JSON or tensor
  // bytes whatever the label.
  void post(const char* pattern, const std::string& endpoint,
            std::function<void(const httplib::Request&, const std::string& body, httplib::Response&)> f) {
    http_.Post(pattern, [this, endpoint, f](const httplib::Request& req, httplib::Response& res,
                                            const httplib::ContentReader& read) {
      std::string body;
      const auto append = [&](const char* data, size_t size) { return body.append(data, size), true; };
      const bool form = req.is_multipart_form_data();
      const bool complete = form ? read([](const httplib::MultipartFormData&) { return true; }, append) : read(append);
      handle(endpoint, [&](const httplib::Request&, httplib::Response&) {
        if (res.status == 413) throw HttpError(413, "the request body is over the server's limit (--max-body)");
        if (!complete) throw HttpError(400, "the request body could not be read");
        if (form) throw HttpError(400, "send the request as JSON, not as a multipart form");
        f(req, body, res);
      })(req, res);
    });
  }

  void routes() {
    auto health = [this](const httplib::Request&, httplib::Response& res) {
      if (!ready_) {
        std::lock_guard<std::mutex> lock(models_mutex_);
        throw HttpError(503, load_error_.empty() ? "loading models" : load_error_);
      }
      res.set_content(json{{"status", "ok"}}.dump(), "application/json");
    };
    http_.Get("/health", handle("/health", health));
    http_.Get("/v2/health/ready", handle("/v2/health/ready", health));
    http_.Get("/v2/health/live", handle("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(json{{"live", true}}.dump(), "application/json");
    }));
    http_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(index_page(), "text/html; charset=utf-8");
    });
    http_.Get("/v1/runs", handle("/v1/runs", [this](const httplib::Request&, httplib::Response& res) {
      json runs = json::array();
      std::error_code ec;
      if (!o_.runs_dir.empty())
        for (const auto& e : std::filesystem::directory_iterator(o_.runs_dir, ec))
          if (std::filesystem::exists(e.path() / "metrics.jsonl", ec)) runs.push_back(e.path().filename().string());
      std::sort(runs.begin(), runs.end());
      res.set_content(json{{"runs", runs}}.dump(), "application/json");
    }));
    http_.Get(R"(/v1/runs/([^/]+)/metrics)", handle("/v1/runs/{name}/metrics", [this](const httplib::Request& req,
                                                                                      httplib::Response& res) {
      const std::string name = req.matches[1];
      if (o_.runs_dir.empty() || name == "." || name == "..") throw HttpError(404, "no run '" + name + "'");
      std::ifstream in(std::filesystem::path(o_.runs_dir) / name / "metrics.jsonl", std::ios::binary);
      if (!in) throw HttpError(404, "no run '" + name + "' with a metrics.jsonl under --runs");
      std::ostringstream read;
      read << in.rdbuf();
      // A live run appends to the file: its last line may be half written.
      // Only complete lines go out, so a reader never sees a torn record.
      std::string text = std::move(read).str();
      text.resize(text.rfind('\n') + 1);  // npos + 1 is 0: no complete line
      res.set_content(text, "application/x-ndjson");
    }));
    http_.Get(R"(/v1/samples/fashion-mnist/(\d+))", handle("/v1/samples/fashion-mnist/{index}", [this](
                                                               const httplib::Request& req, httplib::Response& res) {
      res.set_content(fashion_sample(std::stoll(req.matches[1])).dump(), "application/json");
    }));
    http_.Get("/metrics", handle("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.prometheus(), "text/plain; version=0.0.4");
    }));
    // OpenAI's model objects, with what Kiln says of each (kind, recipe, step).
    auto model_object = [](const ServedModel& m) {
      return json{{"id", m.name},
                  {"object", "model"},
                  {"created", m.created},
                  {"owned_by", "kiln"},
                  {"kind", model_kind_name(m.kind)},
                  {"recipe", m.recipe},
                  {"step", m.step}};
    };
    for (const char* path : {"/v1/models", "/models"})  // (llama-server answers both)
      http_.Get(path, handle(path, [this, model_object](const httplib::Request&, httplib::Response& res) {
                  if (!ready_) throw HttpError(503, "models are still loading");
                  json data = json::array();
                  for (const auto& [name, m] : models_) data.push_back(model_object(*m));
                  res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
                }));
    // One of them (OpenAI's models.retrieve): 404 for a model not served.
    http_.Get(R"(/v1/models/([^/]+))", handle("/v1/models/{name}", [this, model_object](const httplib::Request& req,
                                                                                       httplib::Response& res) {
      res.set_content(model_object(model(req.matches[1])).dump(), "application/json");
    }));
    // KServe v2 server metadata; its extensions say Triton's clients may send tensors as bytes.
    http_.Get("/v2", handle("/v2", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(json{{"name", "kiln"}, {"version", KILN_VERSION}, {"extensions", {"binary_tensor_data"}}}.dump(),
                      "application/json");
    }));
    http_.Get(R"(/v2/models/([^/]+)/ready)", handle("/v2/models/{name}/ready", [this](const httplib::Request& req,
                                                                                       httplib::Response& res) {
      model(req.matches[1]);  // 503 while loading, 404 for a model not served
      res.set_content(json{{"name", req.matches[1]}, {"ready", true}}.dump(), "application/json");
    }));
    http_.Get(R"(/v2/models/([^/]+))", handle("/v2/models/{name}", [this](const httplib::Request& req,
                                                                           httplib::Response& res) {
      res.set_content(model_metadata(model(req.matches[1])).dump(), "application/json");
    }));
    post(R"(/v2/models/([^/]+)/infer)", "/v2/models/{name}/infer",
         [this](const httplib::Request& req, const std::string& body, httplib::Response& res) {
           answer_infer(encoder(model(req.matches[1])), req, body, res);
         });
    post("/v1/classify", "/v1/classify", [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
      const ClassifyRequest r = parse_classify(body, o_.batching.max_batch);
      answer_classify(encoder(model(r.model)), r, res);
    });
    for (const char* path : {"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"})  // (llama-server's names)
      post(path, path, [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
        const RerankRequest r = parse_rerank(body);
        answer_rerank(classifier(r.model), r, res);
      });
    for (const char* path : {"/v1/score", "/score"})  // vLLM's
      post(path, path, [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
        const ScoreRequest r = parse_score(body);
        answer_score(classifier(r.model), r, res);
      });
    post("/v1/embeddings", "/v1/embeddings",
         [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
           const EmbeddingsRequest r = parse_embeddings(body);
           answer_embeddings(embedder(r.model), r, res);
         });
    // Hugging Face text-embeddings-inference's: the embeddings alone, [[...], ...]; and a classifier's labels by
    // score. TEI's root answers as the model it serves does: huggingface_hub's InferenceClient(model=URL) posts
    // feature_extraction and text_classification there (and LangChain's HuggingFaceEndpointEmbeddings).
    auto tei_embed = [this](const std::string& body, httplib::Response& res) {
      const EmbeddingsRequest r = parse_tei_embed(body);
      answer_tei_embed(embedder(r.model), r, res);
    };
    auto tei_predict = [this](const std::string& body, httplib::Response& res, bool as_list) {
      const PredictRequest r = parse_tei_predict(body, o_.batching.max_batch);
      answer_predict(classifier(r.model), r, res, as_list);
    };
    post("/embed", "/embed", [tei_embed](const httplib::Request&, const std::string& body, httplib::Response& res) {
      tei_embed(body, res);
    });
    post("/predict", "/predict",
         [tei_predict](const httplib::Request&, const std::string& body, httplib::Response& res) {
           tei_predict(body, res, false);
         });
    post("/", "/", [this, tei_embed, tei_predict](const httplib::Request&, const std::string& body,
                                                 httplib::Response& res) {
      if (tei_root_kind(body) == recipes::ModelKind::text_embedder) return tei_embed(body, res);
      tei_predict(body, res, /*as_list=*/true);
    });
    // llama-server's own: [{"index", "embedding": [[...]]}] (a pooled model's one vector, in a list).
    for (const char* path : {"/embedding", "/embeddings"})
      post(path, path, [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
        const EmbeddingsRequest r = parse_llama_embedding(body);
        answer_llama_embedding(embedder(r.model), r, res);
      });
    // The language models' endpoints: a body parsed, then answered by the model it names.
    language_endpoint("/v1/completions", parse_completion, answer_completion);
    language_endpoint("/v1/chat/completions", parse_chat, answer_chat);
    language_endpoint("/chat/completions", parse_chat, answer_chat);  // (llama-server's, without /v1)
    language_endpoint("/apply-template", parse_chat, answer_apply_template);
    // OpenAI's Responses API (responses_requests.h) and Anthropic's Messages API (anthropic_requests.h).
    language_endpoint("/v1/responses", parse_openai_responses, answer_openai_responses);
    language_endpoint("/responses", parse_openai_responses, answer_openai_responses);  // (llama-server's, without /v1)
    language_endpoint("/v1/messages", [](const std::string& body) { return parse_anthropic_messages(body); },
                      answer_anthropic_messages);
    language_endpoint("/v1/messages/count_tokens",
                      [](const std::string& body) { return parse_anthropic_messages(body, /*counting=*/true); },
                      answer_anthropic_count_tokens);
    language_endpoint("/completion", parse_llama_completion, answer_llama_completion);   // llama-server's own
    language_endpoint("/completions", parse_llama_completion, answer_llama_completion);  // and its alias
    language_endpoint("/infill", parse_llama_infill, answer_llama_infill);
    language_endpoint("/tokenize", parse_tokenize, answer_tokenize);
    language_endpoint("/detokenize", parse_detokenize, answer_detokenize);
    // ?model=NAME, or the one language model served (llama-server's router takes ?model= too)
    http_.Get("/tokenizer_info", handle("/tokenizer_info", [this](const httplib::Request& req, httplib::Response& res) {
      answer_tokenizer_info(language_model(req.get_param_value("model")), res);
    }));
    // Ollama's API (ollama_requests.h), for clients written for `ollama serve`.
    language_endpoint("/api/chat", parse_ollama_chat, answer_ollama_chat);
    post("/api/generate", "/api/generate",
         [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
           const OllamaGenerateRequest r = parse_ollama_generate(body);
           answer_ollama_generate(language_model(r.chat.model), r, res);
         });
    for (const bool older : {false, true})
      post(older ? "/api/embeddings" : "/api/embed", older ? "/api/embeddings" : "/api/embed",
           [this, older](const httplib::Request&, const std::string& body, httplib::Response& res) {
             const EmbeddingsRequest r = parse_ollama_embed(body, older);
             answer_ollama_embed(embedder(r.model), r, older, res);
           });
    for (const bool loaded : {false, true}) {
      const char* path = loaded ? "/api/ps" : "/api/tags";
      http_.Get(path, handle(path, [this, loaded](const httplib::Request&, httplib::Response& res) {
                  if (!ready_) throw HttpError(503, "models are still loading");
                  std::vector<OllamaModel> list;
                  for (const auto& [name, m] : models_)
                    if (m->kind == recipes::ModelKind::language_model || m->kind == recipes::ModelKind::text_embedder)
                      list.push_back(ollama_model(*m));
                  res.set_content((loaded ? ollama_ps(list) : ollama_tags(list)).dump(), "application/json");
                }));
    }
    post("/api/show", "/api/show", [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
      const json r = json::parse(body, nullptr, false);
      if (!r.is_object() || !r.value("model", json()).is_string())
        throw HttpError(400, "/api/show takes {\"model\": NAME}");
      res.set_content(ollama_show(ollama_model(model(r["model"]))).dump(-1, ' ', false, json::error_handler_t::replace),
                      "application/json");
    });
    http_.Get("/api/version", handle("/api/version", [](const httplib::Request&, httplib::Response& res) {
                res.set_content(json{{"version", KILN_VERSION}}.dump(), "application/json");
              }));
    http_.Get("/props", handle("/props", [this](const httplib::Request& req, httplib::Response& res) {
                const GenerationTarget t = language_model(req.get_param_value("model"));
                answer_props(t, model(t.name).dir, o_.batching.max_batch, res);
              }));
    http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string what = res.status == 404   ? "no such path: " + req.method + " " + req.path
                               : res.status == 413 ? "the request body is over the server's limit (--max-body)"
                                                   : "request failed";
      res.set_content(error_body(what, res.status), "application/json");
    });
  }

  // A Fashion-MNIST test image for the page: pixels in [0, 1] and its label.
  json fashion_sample(int64_t index) {
    std::call_once(test_set_loaded_, [&] {
      try {
        test_set_ = data::load_fashion_mnist(data::FashionMnistPart::test);
      } catch (const std::exception&) {
      }
    });
    if (test_set_.size() == 0) throw HttpError(404, "the Fashion-MNIST test set is not installed (dataset-fashion-mnist)");
    if (index < 0 || index >= test_set_.size())
      throw HttpError(404, "test image " + std::to_string(index) + " does not exist (0 to " +
                               std::to_string(test_set_.size() - 1) + ")");
    const uint8_t* p = test_set_.images.data<uint8_t>() + index * 784;
    std::vector<float> pixels(p, p + 784);
    for (float& v : pixels) v /= 255.0f;
    const int64_t label = test_set_.labels.data<int64_t>()[index];
    return {{"index", index}, {"pixels", pixels}, {"label", data::fashion_mnist_class_names()[size_t(label)]}};
  }

  static json model_metadata(const ServedModel& m) {
    json meta{{"name", m.name}, {"versions", {std::to_string(m.step)}}, {"platform", "kiln"},
              {"kind", model_kind_name(m.kind)}};
    if (m.kind == recipes::ModelKind::image_classifier) {
      meta["inputs"] = {{{"name", "images"}, {"datatype", "FP32"}, {"shape", {-1, 1, 28, 28}}}};
      meta["outputs"] = {{{"name", "probabilities"}, {"datatype", "FP32"}, {"shape", {-1, 10}}},
                         {{"name", "label"}, {"datatype", "BYTES"}, {"shape", {-1}}}};
    }
    return meta;
  }

  // What TEI's root answers as: the kind of the model the body names, or of the one embedder or classifier served.
  recipes::ModelKind tei_root_kind(const std::string& body) {
    const json named = json::parse(body, nullptr, false);
    if (named.is_object() && named.value("model", json()).is_string()) return model(named["model"]).kind;
    if (!ready_) throw HttpError(503, "models are still loading");
    std::vector<recipes::ModelKind> kinds;
    for (const auto& [name, m] : models_)
      if (m->kind == recipes::ModelKind::text_embedder || m->kind == recipes::ModelKind::text_classifier)
        kinds.push_back(m->kind);
    if (kinds.size() != 1)
      throw HttpError(400, "POST / answers as TEI's root, for the one embedder or classifier served; " +
                               std::to_string(kinds.size()) + " are: name the model, or use /embed or /predict");
    return kinds[0];
  }

  // The model a request names, or the one of `kind` served where it names none (`what`: that kind, in the
  // plural); each answer checks the kind it takes.
  EncoderTarget encoder(ServedModel& m) { return {m, o_.request_timeout_ms, o_.batching.max_batch, next_id_}; }
  EncoderTarget encoder(const std::string& name, recipes::ModelKind kind, const std::string& what) {
    return encoder(name.empty() ? only_model(kind, what) : model(name));
  }
  EncoderTarget embedder(const std::string& name) {
    return encoder(name, recipes::ModelKind::text_embedder, "text embedders");
  }
  EncoderTarget classifier(const std::string& name) {
    return encoder(name, recipes::ModelKind::text_classifier, "text classifiers");
  }

  // What Ollama's /api/tags and /api/show say of a served language model or embedder.
  OllamaModel ollama_model(const ServedModel& m) {
    OllamaModel o{m.name, m.recipe, m.kind == recipes::ModelKind::text_embedder};
    o.loaded_at = m.loaded_at;
    o.size = m.weights_bytes;
    o.on_gpu = o_.device.is_cuda();
    if (o.embedder) return o;
    o.tools = m.model->tool_call_format() != nullptr;
    o.thinking = m.model->reasoning_format() != nullptr;
    try {  // a Kiln run's GPT has neither a tokenizer to describe nor a context length
      o.context_length = m.model->context_length();
      const json info = m.model->tokenizer_info();
      o.chat_template = info.value("chat_template", json()).is_string() ? info["chat_template"].get<std::string>() : "";
    } catch (const Error&) {
    }
    return o;
  }

  // The generation endpoints' target: a served language model.
  template <typename Parse, typename Answer>
  void language_endpoint(const char* path, Parse parse, Answer answer) {
    post(path, path, [this, parse, answer](const httplib::Request&, const std::string& body, httplib::Response& res) {
      const auto r = parse(body);
      answer(language_model(r.model), r, res);
    });
  }

  // The language model `name`; "" (llama-server's clients name none): the one served.
  GenerationTarget language_model(const std::string& name) {
    ServedModel& m = name.empty() ? only_model(recipes::ModelKind::language_model, "language models") : model(name);
    if (m.kind != recipes::ModelKind::language_model)
      throw HttpError(400, "model '" + m.name + "' is a " + model_kind_name(m.kind) + ", not a language model");
    return {m.name, *m.model, *m.generator, o_.request_timeout_ms, next_id_, open_streams_};
  }

  ServeOptions o_;
  recipes::Log log_;
  httplib::Server http_;
  Metrics metrics_;
  std::mutex models_mutex_;
  std::map<std::string, std::unique_ptr<ServedModel>> models_;
  std::atomic<bool> ready_{false};
  std::string load_error_;
  std::atomic<int64_t> next_id_{1};
  std::atomic<int> open_streams_{0};
  std::once_flag test_set_loaded_;
  data::ImageDataset test_set_;
};

}  // namespace

int run_server(const ServeOptions& options, const recipes::Log& log) {
  KILN_CHECK(!options.models.empty() || !options.runs_dir.empty(),
             "kiln serve needs a --model NAME=RUN_DIR to serve, or --runs DIR to watch");
  g_stop = false;
  Server server(options, log);
  return server.run();
}

}  // namespace kiln::serve
