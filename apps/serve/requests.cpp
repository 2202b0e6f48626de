#include "apps/serve/requests.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace kiln::serve {

namespace {

using nlohmann::json;

json parse_object(const std::string& text) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw HttpError(400, "the request body is not valid JSON");
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object");
  return body;
}

// Whether `v` holds a T exactly. Converting a JSON number that does not fit
// (1e30 to an integer, 1e300 to a float) is undefined behaviour, so it is
// refused before any conversion (the fuzzer found this).
template <typename T>
bool fits(const json& v) {
  if constexpr (std::is_same_v<T, int64_t>)
    return v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX));
  else if constexpr (std::is_same_v<T, uint64_t>)
    return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
  else if constexpr (std::is_same_v<T, double>)
    return v.is_number();
  else if constexpr (std::is_same_v<T, float>)
    return v.is_number() && std::abs(v.get<double>()) <= double(std::numeric_limits<float>::max());
  else if constexpr (std::is_same_v<T, bool>)
    return v.is_boolean();
  else if constexpr (std::is_same_v<T, std::string>)
    return v.is_string();
  else  // std::vector<E>
    return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return fits<typename T::value_type>(e); });
}

template <typename T>
T field(const json& body, const std::string& key, const char* type, std::optional<T> fallback = {}) {
  if (!body.contains(key)) {
    if (fallback) return *fallback;
    throw HttpError(400, "missing field '" + key + "'");
  }
  const json& v = body.at(key);
  if (!fits<T>(v)) throw HttpError(400, "field '" + key + "' must be " + type);
  return v.get<T>();
}

}  // namespace

InferRequest parse_infer(const std::string& text, int64_t max_batch) {
  const json body = parse_object(text);
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
  r.pixels = field<std::vector<float>>(in, "data", "an array of FP32 numbers");
  if (int64_t(r.pixels.size()) != r.images * 784)
    throw HttpError(400, "data holds " + std::to_string(r.pixels.size()) + " numbers; shape needs " +
                             std::to_string(r.images * 784));
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

CompletionRequest parse_completion(const std::string& text) {
  const json body = parse_object(text);
  CompletionRequest r;
  r.model = field<std::string>(body, "model", "a string");
  r.prompt = field<std::string>(body, "prompt", "a string", std::string());
  r.max_tokens = field<int64_t>(body, "max_tokens", "an integer", int64_t(16));
  r.temperature = field<double>(body, "temperature", "a number", 1.0);
  r.top_k = field<int64_t>(body, "top_k", "an integer", int64_t(0));
  r.top_p = field<double>(body, "top_p", "a number", 1.0);
  r.seed = field<uint64_t>(body, "seed", "a non-negative integer", uint64_t(1));
  if (body.contains("stop") && body["stop"].is_string())
    r.stop = {body["stop"].get<std::string>()};
  else
    r.stop = field<std::vector<std::string>>(body, "stop", "a string or an array of strings", std::vector<std::string>{});
  r.stream = field<bool>(body, "stream", "true or false", false);
  r.ignore_eos = field<bool>(body, "ignore_eos", "true or false", false);
  if (r.max_tokens < 0 || r.max_tokens > 4096) throw HttpError(400, "max_tokens must be in [0, 4096]");
  if (!(r.temperature > 0)) throw HttpError(400, "temperature must be > 0");
  if (!(r.top_p > 0 && r.top_p <= 1)) throw HttpError(400, "top_p must be in (0, 1]");
  if (r.top_k < 0) throw HttpError(400, "top_k must be >= 0");
  return r;
}

}  // namespace kiln::serve
