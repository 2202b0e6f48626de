// The answers of the endpoints that run a model once over their inputs:
// KServe v2's image classification, text classifiers (/v1/classify, TEI's
// /predict), embedders (OpenAI's, TEI's, llama-server's and Ollama's
// embeddings) and rerankers (Jina's and Cohere's /v1/rerank, vLLM's
// /v1/score). Inputs go through the model's batcher, so they share batches
// with other requests; a reranker's pairs run while the model is held.
#pragma once
#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "apps/serve/requests.h"
#include "apps/serve/served_model.h"

namespace kiln::serve {

// A served classifier, embedder or reranker, as the answers need it; each answer checks its kind.
struct EncoderTarget {
  ServedModel& served;
  int64_t timeout_ms;             // a request's wait for its batches
  int64_t max_batch;              // rows a batch: an embeddings request is split into batches of it
  std::atomic<int64_t>& next_id;  // answers' ids: score-N, rerank-N
};

// KServe v2's POST /v2/models/NAME/infer: JSON, or with the binary tensor data extension (requests.h).
void answer_infer(const EncoderTarget& target, const httplib::Request& req, const std::string& body,
                  httplib::Response& res);
// POST /v1/classify: each text's label and class probabilities.
void answer_classify(const EncoderTarget& target, const ClassifyRequest& request, httplib::Response& res);
// TEI's /predict: each text's labels by score, best first; a list of those for a list of texts, and always at TEI's
// root (`as_list`: the Inference API's shape, which huggingface_hub reads).
void answer_predict(const EncoderTarget& target, const PredictRequest& request, httplib::Response& res,
                    bool as_list = false);
// Embeddings: OpenAI's list, TEI's bare [[...], ...], llama-server's [{"index", "embedding": [[...]]}] and Ollama's
// (/api/embed's L2-normalised, the `older` /api/embeddings' as the model gives it).
void answer_embeddings(const EncoderTarget& target, const EmbeddingsRequest& request, httplib::Response& res);
void answer_tei_embed(const EncoderTarget& target, const EmbeddingsRequest& request, httplib::Response& res);
void answer_llama_embedding(const EncoderTarget& target, const EmbeddingsRequest& request, httplib::Response& res);
void answer_ollama_embed(const EncoderTarget& target, const EmbeddingsRequest& request, bool older,
                         httplib::Response& res);
// vLLM's /v1/score: each pair's relevance in the order asked; Jina's and Cohere's /v1/rerank (and TEI's): each
// document's relevance, best first.
void answer_score(const EncoderTarget& target, const ScoreRequest& request, httplib::Response& res);
void answer_rerank(const EncoderTarget& target, const RerankRequest& request, httplib::Response& res);

}  // namespace kiln::serve
