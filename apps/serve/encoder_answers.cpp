#include "apps/serve/encoder_answers.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "kiln/autograd/ops.h"
#include "kiln/core/error.h"
#include "kiln/text/base64.h"
#include "models/hf/hf_embedder.h"

namespace kiln::serve {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The binary tensor data extension's header: the JSON part's length in a body that goes on with tensor bytes.
constexpr const char* kInferenceHeaderLength = "Inference-Header-Content-Length";

Tensor wait_for(std::future<Tensor>& f, int64_t timeout_ms) {
  if (f.wait_for(std::chrono::milliseconds(timeout_ms)) != std::future_status::ready)
    throw HttpError(504, "the request was not answered within " + std::to_string(timeout_ms) + " ms");
  return f.get();
}

}  // namespace

// KServe v2: {"inputs": [{"name", "shape": [N, 1, 28, 28] or [N, 784], "datatype": "FP32", "data": [...]}]},
// or with the binary tensor data extension the pixels' bytes after the JSON (requests.h).
void answer_infer(const EncoderTarget& target, const httplib::Request& req, const std::string& body,
                  httplib::Response& res) {
  ServedModel& m = target.served;
  if (m.kind != recipes::ModelKind::image_classifier)
    throw HttpError(400, "model '" + m.name + "' is a " + model_kind_name(m.kind) + "; /v2/models/" + m.name +
                             "/infer serves image classifiers (use /v1/completions)");
  const std::string header_length = req.get_header_value(kInferenceHeaderLength);
  const InferRequest r = parse_infer(body, target.max_batch,
                                     req.has_header(kInferenceHeaderLength) ? std::optional<std::string_view>(header_length)
                                                                            : std::nullopt);
  auto queued = m.batcher->submit(Tensor::from_vector(r.pixels, {r.images, 1, 28, 28}));
  if (!queued) throw HttpError(503, "model '" + m.name + "' is at its queue limit (--max-queue); retry shortly");
  const std::vector<float> p = wait_for(*queued, target.timeout_ms).to_vector<float>();
  const std::vector<std::string> names = m.model->labels();
  const size_t classes = names.size();
  std::vector<std::string> labels;
  for (int64_t i = 0; i < r.images; ++i) {
    auto row = p.begin() + long(size_t(i) * classes);
    labels.push_back(names[size_t(std::max_element(row, row + long(classes)) - row)]);
  }
  // Binary outputs go after the JSON header in the order listed: FP32 as
  // little-endian bytes, BYTES as each string's 4-byte length and its bytes.
  json outputs = json::array();
  std::string binary;
  for (const InferRequest::Output& o : r.outputs) {
    const bool probabilities = o.name == "probabilities";
    json out{{"name", o.name}, {"datatype", probabilities ? "FP32" : "BYTES"}};
    out["shape"] = probabilities ? json{r.images, int64_t(classes)} : json{r.images};
    if (!o.binary) {
      out["data"] = probabilities ? json(p) : json(labels);
    } else {
      const size_t before = binary.size();
      if (probabilities)
        binary.append(reinterpret_cast<const char*>(p.data()), p.size() * sizeof(float));
      else
        for (const std::string& label : labels) {
          const uint32_t length = uint32_t(label.size());
          binary.append(reinterpret_cast<const char*>(&length), sizeof length).append(label);
        }
      out["parameters"] = {{"binary_data_size", binary.size() - before}};
    }
    outputs.push_back(std::move(out));
  }
  std::string header =
      json{{"model_name", m.name}, {"model_version", std::to_string(m.step)}, {"outputs", outputs}}.dump();
  if (binary.empty()) return res.set_content(header, "application/json");
  res.set_header(kInferenceHeaderLength, std::to_string(header.size()));
  res.set_content(header + binary, "application/octet-stream");
}

namespace {

// The texts' class probabilities [texts x labels] from text classifier `m`, through its batcher.
std::vector<float> probabilities(ServedModel& m, const std::vector<std::string>& texts, int64_t timeout_ms) {
  if (m.kind != recipes::ModelKind::text_classifier)
    throw HttpError(400, "model '" + m.name + "' is a " + model_kind_name(m.kind) + ", not a text classifier");
  auto queued = m.batcher->submit(m.model->encode_texts(texts));
  if (!queued) throw HttpError(503, "model '" + m.name + "' is at its queue limit (--max-queue); retry shortly");
  return wait_for(*queued, timeout_ms).to_vector<float>();
}

}  // namespace

void answer_predict(const EncoderTarget& target, const PredictRequest& r, httplib::Response& res, bool as_list) {
  ServedModel& m = target.served;
  const std::vector<float> p = probabilities(m, r.texts, target.timeout_ms);
  const std::vector<std::string> names = m.model->labels();
  json answer = json::array();
  for (size_t i = 0; i < r.texts.size(); ++i) {
    std::vector<size_t> order(names.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    const float* row = p.data() + i * names.size();
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return row[a] > row[b]; });
    json ranked = json::array();
    if (r.top_k && size_t(*r.top_k) < order.size()) order.resize(size_t(*r.top_k));
    for (size_t k : order) ranked.push_back({{"score", row[k]}, {"label", names[k]}});
    answer.push_back(std::move(ranked));
  }
  res.set_content((r.batch || as_list ? answer : answer[0]).dump(), "application/json");
}

void answer_classify(const EncoderTarget& target, const ClassifyRequest& r, httplib::Response& res) {
  ServedModel& m = target.served;
  const std::vector<std::string>& texts = r.texts;
  const std::vector<float> p = probabilities(m, texts, target.timeout_ms);
  const std::vector<std::string> names = m.model->labels();
  json data = json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    json probs = json::object();
    size_t best = 0;
    for (size_t k = 0; k < names.size(); ++k) {
      probs[names[k]] = p[i * names.size() + k];
      if (p[i * names.size() + k] > p[i * names.size() + best]) best = k;
    }
    data.push_back({{"index", i}, {"label", names[best]}, {"probabilities", probs}});
  }
  res.set_content(json{{"model", m.name}, {"data", data}}.dump(), "application/json");
}

namespace {

// The texts' embeddings, and the tokens read; they go through the model's
// batcher, max_batch at a time, so they share batches with other requests.
std::pair<std::vector<std::vector<float>>, int64_t> embeddings(const EncoderTarget& target,
                                                               const EmbeddingsRequest& r) {
  ServedModel& m = target.served;
  if (m.kind != recipes::ModelKind::text_embedder)
    throw HttpError(400, "model '" + m.name + "' is a " + model_kind_name(m.kind) + ", not a text embedder");
  Tensor ids;
  try {
    ids = m.model->encode_embedding_texts(r.texts, {r.prompt_name, r.truncate});
  } catch (const recipes::TextTooLong& e) {
    throw HttpError(413, "model '" + m.name + "': " + e.what());
  } catch (const Error& e) {
    throw HttpError(400, "model '" + m.name + "': " + e.what());
  }
  std::vector<std::future<Tensor>> parts;
  const int64_t n = ids.size(0), step = target.max_batch;
  for (int64_t first = 0; first < n; first += step) {
    auto queued = m.batcher->submit(contiguous(slice(ids, 0, first, std::min(n, first + step))));
    if (!queued) throw HttpError(503, "model '" + m.name + "' is at its queue limit (--max-queue); retry shortly");
    parts.push_back(std::move(*queued));
  }
  int64_t tokens = 0;  // (a text's own tokens may be the pad's id: only the padding after it is not read)
  for (int64_t n : recipes::unpadded_lengths(ids, m.model->pad_token().value_or(0))) tokens += n;
  std::vector<std::vector<float>> out;
  for (auto& part : parts) {
    const Tensor rows = wait_for(part, target.timeout_ms);
    const int64_t width = rows.size(1);
    if (r.dimensions && (*r.dimensions < 1 || *r.dimensions > width))
      throw HttpError(400, "'dimensions' is " + std::to_string(*r.dimensions) + "; model '" + m.name + "' gives " +
                               std::to_string(width) + ", and shortens its embeddings to 1 to " +
                               std::to_string(width));
    // Shortened (Matryoshka models, EmbeddingGemma's 512, 256 or 128): the first `dimensions` values, then
    // normalised as the request says (OpenAI's and Ollama's shortened ones to length 1 again).
    const int64_t kept = r.dimensions.value_or(width);
    const std::vector<float> v = rows.to_vector<float>();
    for (int64_t i = 0; i < rows.size(0); ++i) {
      out.emplace_back(v.begin() + i * width, v.begin() + i * width + kept);
      models::normalize_embedding(out.back(), r.normalization);
    }
  }
  return {std::move(out), tokens};
}

// `m`, a reranker.
ServedModel& reranker(ServedModel& m) {
  if (m.kind != recipes::ModelKind::text_classifier)
    throw HttpError(400,
                    "model '" + m.name + "' is a " + model_kind_name(m.kind) +
                        ", not a reranker (a cross-encoder: a text classifier with one label; or Qwen3-Reranker)");
  return m;
}

// `documents`' relevance to `query` on reranker `m`, run while the model is held.
recipes::InferenceModel::Relevance relevance(ServedModel& m, const std::string& query,
                                             const std::vector<std::string>& documents) {
  try {
    std::lock_guard<std::mutex> lock(*m.running);
    return m.model->rerank(query, documents);
  } catch (const Error& e) {
    throw HttpError(400, "model '" + m.name + "': " + e.what());
  }
}

}  // namespace

// ({"index", "object": "score", "score"})
void answer_score(const EncoderTarget& target, const ScoreRequest& r, httplib::Response& res) {
  ServedModel& m = reranker(target.served);
  std::vector<double> scores;
  int64_t tokens = 0;
  // One text_1 against many: one call; pairs of their own: a call each.
  const bool one_query =
      std::all_of(r.pairs.begin(), r.pairs.end(), [&](const auto& p) { return p.first == r.pairs[0].first; });
  for (size_t i = 0; i < r.pairs.size(); i += one_query ? r.pairs.size() : 1) {
    std::vector<std::string> documents;
    for (size_t j = i; j < (one_query ? r.pairs.size() : i + 1); ++j) documents.push_back(r.pairs[j].second);
    const recipes::InferenceModel::Relevance scored = relevance(m, r.pairs[i].first, documents);
    scores.insert(scores.end(), scored.scores.begin(), scored.scores.end());
    tokens += scored.tokens;
  }
  json data = json::array();
  for (size_t i = 0; i < scores.size(); ++i)
    data.push_back({{"index", i}, {"object", "score"}, {"score", scores[i]}});
  res.set_content(json{{"id", "score-" + std::to_string(target.next_id++)},
                       {"object", "list"},
                       {"created", std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count()},
                       {"model", m.name},
                       {"data", data},
                       {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}
                      .dump(),
                  "application/json");
}

// ({"index", "relevance_score", "document": {"text"}}; TEI's {"index", "score", "text"}), the top_n only where asked.
void answer_rerank(const EncoderTarget& target, const RerankRequest& r, httplib::Response& res) {
  ServedModel& m = reranker(target.served);
  const recipes::InferenceModel::Relevance scored = relevance(m, r.query, r.documents);
  std::vector<size_t> order(r.documents.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scored.scores[a] > scored.scores[b]; });
  if (r.top_n && size_t(*r.top_n) < order.size()) order.resize(size_t(*r.top_n));
  json results = json::array();
  for (size_t i : order) {
    json one = {{"index", i}, {r.tei ? "score" : "relevance_score", scored.scores[i]}};
    if (r.return_documents && r.tei) one["text"] = r.documents[i];
    if (r.return_documents && !r.tei) one["document"] = {{"text", r.documents[i]}};
    results.push_back(std::move(one));
  }
  if (r.tei) return res.set_content(results.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  res.set_content(json{{"id", "rerank-" + std::to_string(target.next_id++)},
                       {"model", m.name},
                       {"results", results},
                       {"usage", {{"prompt_tokens", scored.tokens}, {"total_tokens", scored.tokens}}}}
                      .dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

void answer_embeddings(const EncoderTarget& target, const EmbeddingsRequest& r, httplib::Response& res) {
  const auto [vectors, tokens] = embeddings(target, r);
  json data = json::array();
  for (const std::vector<float>& e : vectors)
    data.push_back(
        {{"object", "embedding"},
         {"index", data.size()},
         {"embedding", r.base64 ? json(text::base64_encode(e.data(), e.size() * sizeof(float))) : json(e)}});
  res.set_content(json{{"object", "list"},
                       {"data", data},
                       {"model", r.model},
                       {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}
                      .dump(),
                  "application/json");
}

void answer_tei_embed(const EncoderTarget& target, const EmbeddingsRequest& r, httplib::Response& res) {
  res.set_content(json(embeddings(target, r).first).dump(), "application/json");
}

void answer_llama_embedding(const EncoderTarget& target, const EmbeddingsRequest& r, httplib::Response& res) {
  json answer = json::array();  // (a pooled model's one vector, in a list)
  for (std::vector<float>& e : embeddings(target, r).first)
    answer.push_back({{"index", answer.size()}, {"embedding", json::array({std::move(e)})}});
  res.set_content(answer.dump(), "application/json");
}

// (/api/embed's L2-normalised, as Ollama normalises them)
void answer_ollama_embed(const EncoderTarget& target, const EmbeddingsRequest& r, bool older,
                         httplib::Response& res) {
  const auto start = Clock::now();
  const auto [vectors, tokens] = embeddings(target, r);
  if (older) return res.set_content(json{{"embedding", vectors.front()}}.dump(), "application/json");
  res.set_content(
      json{{"model", r.model},
           {"embeddings", vectors},
           {"total_duration", std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count()},
           {"load_duration", 0},
           {"prompt_eval_count", tokens}}
          .dump(),
      "application/json");
}

}  // namespace kiln::serve
