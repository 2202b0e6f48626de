// The bodies of the endpoints whose models read texts or images and answer at once (no generation): KServe's
// infer, classification (Kiln's and TEI's predict), rerank and vLLM's score, and embeddings (OpenAI's, TEI's,
// llama-server's). Declared in requests.h.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "apps/serve/request_fields.h"
#include "apps/serve/requests.h"

namespace kiln::serve {

namespace {

using json = nlohmann::ordered_json;  // (request_fields.h: in key order, as sent)

// The JSON header's length in a body that continues with binary tensor data.
size_t json_header_length(std::string_view value, size_t body_size) {
  uint64_t length = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), length);
  if (error != std::errc() || end != value.data() + value.size() || length > body_size)
    throw HttpError(400, "Inference-Header-Content-Length must be the JSON header's length in bytes (at most the "
                         "body's " + std::to_string(body_size) + ")");
  return size_t(length);
}

// The pixels of `images` images: the input's JSON "data", or (parameters.binary_data_size) `binary`.
std::vector<float> input_pixels(const json& in, int64_t images, std::string_view binary) {
  const size_t count = size_t(images) * 784;
  const json* params = in.contains("parameters") ? &in["parameters"] : nullptr;
  if (params && !params->is_object()) throw HttpError(400, "the input's 'parameters' must be an object");
  if (!params || !params->contains("binary_data_size")) {
    if (!binary.empty())
      throw HttpError(400, "the body goes on after its JSON header, but the input has no parameters.binary_data_size");
    auto pixels = field<std::vector<float>>(in, "data", "an array of FP32 numbers");
    if (pixels.size() != count)
      throw HttpError(400, "data holds " + std::to_string(pixels.size()) + " numbers; shape needs " +
                               std::to_string(count));
    return pixels;
  }
  if (in.contains("data")) throw HttpError(400, "the input has both 'data' and parameters.binary_data_size");
  const auto size = field<int64_t>(*params, "binary_data_size", "an integer");
  if (size != int64_t(count * sizeof(float)))
    throw HttpError(400, "binary_data_size is " + std::to_string(size) + " bytes; shape needs " +
                             std::to_string(count * sizeof(float)) + " (FP32)");
  if (binary.size() != size_t(size))
    throw HttpError(400, "the body holds " + std::to_string(binary.size()) +
                             " bytes after its JSON header; binary_data_size says " + std::to_string(size));
  static_assert(std::endian::native == std::endian::little, "binary tensor data is little-endian");
  std::vector<float> pixels(count);
  std::memcpy(pixels.data(), binary.data(), binary.size());
  // JSON cannot carry NaN or infinity; bytes can, and one would poison its batch's answers.
  if (!std::all_of(pixels.begin(), pixels.end(), [](float v) { return std::isfinite(v); }))
    throw HttpError(400, "the binary data holds a NaN or infinite pixel");
  return pixels;
}

// The outputs the request asks for ("outputs", each with parameters.binary_data), by default both;
// parameters.binary_data_output makes binary the default.
std::vector<InferRequest::Output> requested_outputs(const json& body) {
  bool binary = false;
  if (body.contains("parameters")) {
    if (!body["parameters"].is_object()) throw HttpError(400, "the request's 'parameters' must be an object");
    binary = field<bool>(body["parameters"], "binary_data_output", "true or false", false);
  }
  if (!body.contains("outputs")) return {{"probabilities", binary}, {"label", binary}};
  if (!body["outputs"].is_array() || body["outputs"].empty())
    throw HttpError(400, "'outputs' must be an array of output objects");
  std::vector<InferRequest::Output> outputs;
  for (const json& o : body["outputs"]) {
    if (!o.is_object()) throw HttpError(400, "each of 'outputs' must be an object with a 'name'");
    InferRequest::Output out{field<std::string>(o, "name", "a string"), binary};
    if (out.name != "probabilities" && out.name != "label")
      throw HttpError(400, "no output '" + out.name + "' (the outputs are 'probabilities' and 'label')");
    if (std::any_of(outputs.begin(), outputs.end(), [&](const auto& seen) { return seen.name == out.name; }))
      throw HttpError(400, "output '" + out.name + "' is asked for twice");
    if (o.contains("parameters")) {
      if (!o["parameters"].is_object()) throw HttpError(400, "an output's 'parameters' must be an object");
      out.binary = field<bool>(o["parameters"], "binary_data", "true or false", binary);
    }
    outputs.push_back(out);
  }
  return outputs;
}

}  // namespace

InferRequest parse_infer(const std::string& text, int64_t max_batch, std::optional<std::string_view> header_length) {
  const size_t json_length = header_length ? json_header_length(*header_length, text.size()) : text.size();
  const json body = parse_object(std::string_view(text).substr(0, json_length));
  if (!body.contains("inputs") || !body["inputs"].is_array() || body["inputs"].size() != 1 ||
      !body["inputs"][0].is_object())
    throw HttpError(400, "'inputs' must be an array of one tensor object");
  const json& in = body["inputs"][0];
  const auto shape = field<std::vector<int64_t>>(in, "shape", "an array of integers");
  const auto datatype = field<std::string>(in, "datatype", "a string");
  if (datatype != "FP32") throw HttpError(400, "datatype must be FP32, got " + datatype);
  const bool flat = shape.size() == 2 && shape[1] == 784;
  const bool image = shape.size() == 4 && shape[1] == 1 && shape[2] == 28 && shape[3] == 28;
  if (!(flat || image) || shape[0] < 1) throw HttpError(400, "shape must be [N, 1, 28, 28] or [N, 784] with N >= 1");
  if (shape[0] > max_batch)
    throw HttpError(400, "at most " + std::to_string(max_batch) + " images per request (--max-batch)");
  InferRequest r;
  r.images = shape[0];
  r.pixels = input_pixels(in, r.images, std::string_view(text).substr(json_length));
  r.outputs = requested_outputs(body);
  return r;
}

ClassifyRequest parse_classify(const std::string& text, int64_t max_batch) {
  const json body = parse_object(text);
  ClassifyRequest r;
  r.model = field<std::string>(body, "model", "a string");
  if (!body.contains("input")) throw HttpError(400, "missing field 'input'");
  if (body["input"].is_string())
    r.texts = {body["input"].get<std::string>()};
  else
    r.texts = field<std::vector<std::string>>(body, "input", "a string or an array of strings");
  if (r.texts.empty() || int64_t(r.texts.size()) > max_batch)
    throw HttpError(400, "'input' must hold 1 to " + std::to_string(max_batch) + " texts (--max-batch)");
  return r;
}

PredictRequest parse_tei_predict(const std::string& text, int64_t max_batch) {
  const json body = parse_object(text);
  only(body, {"model", "inputs", "raw_scores", "truncate", "truncation_direction", "parameters"}, "/predict");
  PredictRequest r;
  r.model = field<std::string>(body, "model", "a string", std::string());
  if (!body.contains("inputs")) throw HttpError(400, "missing field 'inputs'");
  const json& inputs = body["inputs"];
  r.batch = inputs.is_array();
  if (r.batch && std::any_of(inputs.begin(), inputs.end(), [](const json& v) { return v.is_array(); }))
    throw HttpError(400,
                    "'inputs' as pairs of texts is not supported: Kiln's classifiers read one text (a "
                    "reranker scores pairs: /rerank)");
  r.texts = r.batch ? field<std::vector<std::string>>(body, "inputs", "a text or an array of texts")
                    : std::vector<std::string>{field<std::string>(body, "inputs", "a text or an array of texts")};
  if (r.texts.empty() || int64_t(r.texts.size()) > max_batch)
    throw HttpError(400, "'inputs' must hold 1 to " + std::to_string(max_batch) + " texts (--max-batch)");
  if (field<bool>(body, "raw_scores", "true or false", false))
    throw HttpError(400, "raw_scores true is not supported: scores are the model's probabilities (TEI's default)");
  field<bool>(body, "truncate", "true or false", false);  // (a text is cut at the model's positions either way)
  if (field<std::string>(body, "truncation_direction", "a string", std::string("Right")) != "Right")
    throw HttpError(400, "truncation_direction must be \"Right\": texts are cut at the end");
  if (body.contains("parameters") && !body["parameters"].is_null()) {
    const json& parameters = body["parameters"];
    if (!parameters.is_object()) throw HttpError(400, "'parameters' must be an object");
    for (const auto& [key, value] : parameters.items()) {
      if (value.is_null()) continue;
      if (key != "top_k")
        throw HttpError(400, "parameters." + key + " is not supported: scores are the model's own probabilities");
      r.top_k = field<int64_t>(parameters, "top_k", "a positive integer");
      if (*r.top_k < 1) throw HttpError(400, "parameters.top_k must be at least 1");
    }
  }
  return r;
}

RerankRequest parse_rerank(const std::string& text) {
  json body = parse_object(text);
  RerankRequest r;
  r.tei = body.contains("texts");
  static const char* const kFields[] = {
      "model", "query", "documents", "top_n", "return_documents", "max_chunks_per_doc", "rank_fields"};
  static const char* const kTeiFields[] = {
      "model", "query", "texts", "return_text", "raw_scores", "truncate", "truncation_direction"};
  if (r.tei)
    only(body, kTeiFields, "/rerank in TEI's form (with 'texts')");
  else
    only(body, kFields, "/rerank");
  r.model = field<std::string>(body, "model", "a string", std::string());
  r.query = field<std::string>(body, "query", "a string");
  const char* list = r.tei ? "texts" : "documents";
  if (!body.contains(list) || !body[list].is_array() || body[list].empty() ||
      int64_t(body[list].size()) > kMaxRerankDocuments)
    throw HttpError(400, "'" + std::string(list) + "' must be an array of 1 to " + std::to_string(kMaxRerankDocuments) +
                             " texts" + (r.tei ? "" : " (or {\"text\"} objects)"));
  if (r.tei) {
    r.return_documents = field<bool>(body, "return_text", "true or false", false);
    if (field<bool>(body, "raw_scores", "true or false", false))
      throw HttpError(400, "raw_scores true is not supported: scores are the sigmoid of the logit (TEI's default)");
    field<bool>(body, "truncate", "true or false", false);  // (a pair is cut at the model's positions either way)
    const std::string direction = field<std::string>(body, "truncation_direction", "a string", std::string("Right"));
    if (direction != "Right") throw HttpError(400, "truncation_direction must be \"Right\": pairs are cut at the end");
  }
  for (const json& d : body[list]) {
    const json text = d.is_object() && !r.tei ? d.value("text", json()) : d;
    if (!text.is_string())
      throw HttpError(400, r.tei ? "each of 'texts' must be a string"
                                 : "each of 'documents' must be a string or an object with a \"text\" string");
    r.documents.push_back(text.get<std::string>());
  }
  if (body.contains("top_n") && !body["top_n"].is_null()) {
    r.top_n = field<int64_t>(body, "top_n", "an integer");
    if (*r.top_n < 1) throw HttpError(400, "top_n must be at least 1");
  }
  if (!r.tei) r.return_documents = field<bool>(body, "return_documents", "true or false", true);
  return r;
}

ScoreRequest parse_score(const std::string& text) {
  const json body = parse_object(text);
  only(body, {"model", "text_1", "text_2", "user"}, "/v1/score");
  auto texts = [&](const char* name) {
    if (!body.contains(name)) throw HttpError(400, std::string("missing field '") + name + "'");
    const json& v = body[name];
    if (v.is_string()) return std::vector<std::string>{v.get<std::string>()};
    auto list = field<std::vector<std::string>>(body, name, "a text or an array of texts");
    if (list.empty() || int64_t(list.size()) > kMaxRerankDocuments)
      throw HttpError(400,
                      std::string("'") + name + "' must hold 1 to " + std::to_string(kMaxRerankDocuments) + " texts");
    return list;
  };
  const std::vector<std::string> first = texts("text_1"), second = texts("text_2");
  if (first.size() > 1 && first.size() != second.size())
    throw HttpError(400, "text_1 holds " + std::to_string(first.size()) + " texts and text_2 " +
                             std::to_string(second.size()) + ": one text_1, or as many as text_2");
  ScoreRequest r;
  r.model = field<std::string>(body, "model", "a string", std::string());
  for (size_t i = 0; i < second.size(); ++i) r.pairs.emplace_back(first[first.size() == 1 ? 0 : i], second[i]);
  return r;
}

namespace {

// An embedding request's fields, each only from `allowed`.
json embedding_body(const std::string& text, const char* endpoint, std::initializer_list<std::string_view> allowed) {
  json body = parse_object(text);
  only(body, allowed, endpoint);
  return body;
}

// The texts to embed: `name` as one string or an array of 1 to kMaxEmbeddingInputs of them.
std::vector<std::string> embedding_texts(const json& body, const std::string& name) {
  if (!body.contains(name)) throw HttpError(400, "missing field '" + name + "'");
  const json& input = body[name];
  if (input.is_array() && !input.empty() && (input[0].is_number() || input[0].is_array()))
    throw HttpError(400,
                    "'" + name + "' as token ids is not supported: send the text (a string or an array of strings)");
  std::vector<std::string> texts =
      input.is_string() ? std::vector<std::string>{input.get<std::string>()}
                        : field<std::vector<std::string>>(body, name.c_str(), "a string or an array of strings");
  if (texts.empty() || int64_t(texts.size()) > kMaxEmbeddingInputs)
    throw HttpError(400, "'" + name + "' must hold 1 to " + std::to_string(kMaxEmbeddingInputs) + " texts");
  return texts;
}

std::optional<int64_t> embedding_dimensions(const json& body) {
  if (!body.contains("dimensions") || body["dimensions"].is_null()) return std::nullopt;
  return field<int64_t>(body, "dimensions", "a positive integer");
}

}  // namespace

EmbeddingsRequest parse_embeddings(const std::string& text) {
  const json body = embedding_body(text, "/v1/embeddings", {"model", "input", "encoding_format", "dimensions", "user"});
  EmbeddingsRequest r;
  r.model = field<std::string>(body, "model", "a string");
  r.texts = embedding_texts(body, "input");
  const std::string format = field<std::string>(body, "encoding_format", "\"float\" or \"base64\"", "float");
  if (format != "float" && format != "base64")
    throw HttpError(400, "'encoding_format' must be \"float\" or \"base64\", not \"" + format + "\"");
  r.base64 = format == "base64";
  r.dimensions = embedding_dimensions(body);
  if (r.dimensions) r.normalization = 2;  // OpenAI's shortened embeddings are normalised again
  field<std::string>(body, "user", "a string", "");
  return r;
}

EmbeddingsRequest parse_tei_embed(const std::string& text) {
  const json body =
      embedding_body(text, "/embed",
                     {"model", "inputs", "normalize", "truncate", "truncation_direction", "prompt_name", "dimensions"});
  EmbeddingsRequest r;
  r.model = field<std::string>(body, "model", "a string", std::string());
  r.texts = embedding_texts(body, "inputs");
  r.normalization = field<bool>(body, "normalize", "true or false", true) ? 2 : -1;
  r.truncate = field<bool>(body, "truncate", "true or false", false);
  const std::string direction = field<std::string>(body, "truncation_direction", "a string", std::string("Right"));
  if (direction != "Right") throw HttpError(400, "truncation_direction must be \"Right\": texts are cut at the end");
  if (body.contains("prompt_name") && !body["prompt_name"].is_null())
    r.prompt_name = field<std::string>(body, "prompt_name", "a string");
  r.dimensions = embedding_dimensions(body);
  return r;
}

EmbeddingsRequest parse_llama_embedding(const std::string& text) {
  const json body =
      embedding_body(text, "/embedding", {"model", "content", "input", "embd_normalize", "encoding_format"});
  EmbeddingsRequest r;
  r.model = field<std::string>(body, "model", "a string", std::string());
  r.texts = embedding_texts(body, body.contains("input") ? "input" : "content");  // (llama-server reads "input" first)
  const int64_t norm = field<int64_t>(body, "embd_normalize", "an integer (-1 none, 0 max |x|, 2 Euclidean, p > 0)", 2);
  if (norm < -1 || norm > 64) throw HttpError(400, "'embd_normalize' must be -1, 0, or a p-norm's p from 1 to 64");
  r.normalization = int(norm);
  if (field<std::string>(body, "encoding_format", "a string", std::string("float")) != "float")
    throw HttpError(400, "'encoding_format' is \"float\" here; /v1/embeddings gives base64");
  return r;
}

}  // namespace kiln::serve
