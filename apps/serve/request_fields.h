// What the request parsers share: the body as a JSON object (with its null
// fields dropped, for the translating parsers: Ollama's, Anthropic's and the
// Responses API's), a field read as the type it must be, a refusal of fields
// the endpoint does not take, and a flat function tool read as OpenAI's.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "apps/serve/requests.h"

namespace kiln::serve {

// The body as a JSON object, ordered (in key order, as sent: a schema's properties and a tool's fields reach the
// model, and an answer is written, in the order the client gave).
inline nlohmann::ordered_json parse_object(std::string_view text) {
  nlohmann::ordered_json body =
      nlohmann::ordered_json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw HttpError(400, "the request body is not valid JSON");
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object");
  return body;
}

// Whether `v` holds a T exactly. Converting a JSON number that does not fit
// (1e30 to an integer, 1e300 to a float) is undefined behaviour, so it is
// refused before any conversion (the fuzzer found this).
template <typename T>
inline bool fits(const nlohmann::ordered_json& v) {
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
    return v.is_array() && std::all_of(v.begin(), v.end(),
                                       [](const nlohmann::ordered_json& e) { return fits<typename T::value_type>(e); });
}

template <typename T>
inline T field(const nlohmann::ordered_json& body, const std::string& key, const char* type,
               std::optional<T> fallback = {}) {
  if (!body.contains(key)) {
    if (fallback) return *fallback;
    throw HttpError(400, "missing field '" + key + "'");
  }
  const nlohmann::ordered_json& v = body.at(key);
  if (!fits<T>(v)) throw HttpError(400, "field '" + key + "' must be " + type);
  return v.get<T>();
}

// The body as a JSON object with its null fields dropped (how clients spell "the default").
inline nlohmann::ordered_json object_of(const std::string& text) {
  nlohmann::ordered_json body = parse_object(text);
  for (auto it = body.begin(); it != body.end();) it = it->is_null() ? body.erase(it) : std::next(it);
  return body;
}

// A 400 for the first field of `body` (either JSON flavour) not among `known` (any range of names).
template <typename Json, typename Names>
void only(const Json& body, const Names& known, const std::string& endpoint) {
  for (auto it = body.begin(); it != body.end(); ++it)
    if (const std::string key = it.key();
        std::none_of(std::begin(known), std::end(known), [&](std::string_view k) { return key == k; }))
      throw HttpError(400, "unknown field '" + key + "' (see docs/SERVING.md for the fields " + endpoint + " takes)");
}
template <typename Json>
void only(const Json& body, std::initializer_list<const char*> known, const std::string& endpoint) {
  only<Json, std::initializer_list<const char*>>(body, known, endpoint);
}

// o[key] as a string, or a 400 naming where it is missing.
inline const nlohmann::ordered_json& string_at(const nlohmann::ordered_json& o, const char* key,
                                               const std::string& where) {
  if (!o.contains(key) || !o[key].is_string()) throw HttpError(400, where + "." + key + " must be a string");
  return o[key];
}

// How an API spells a client's own tool flat ({"type", "name", "description", <schema>}: Anthropic's, the
// Responses API's); any other type is one of its built-in tools, which Kiln does not run.
struct FlatTools {
  const char* own_type;      // a client's own tool's type
  const char* default_type;  // the type where a tool names none
  const char* schema;        // its parameters' key
  std::initializer_list<const char*> fields;
  const char* endpoint;
  const char* spelled;  // how to describe one, for the refusal
};

// Such tools as OpenAI's chat tools ({"type": "function", "function": {"name", "description", "parameters"}}).
inline nlohmann::ordered_json chat_tools_of(const nlohmann::ordered_json& tools, const FlatTools& api) {
  if (!tools.is_array()) throw HttpError(400, "'tools' must be an array");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::ordered_json& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw HttpError(400, where + " must be an object");
    const std::string type = t.value("type", api.default_type);
    if (type != api.own_type)
      throw HttpError(
          400, where + " is the built-in tool '" + type + "': Kiln runs none; describe your own as " + api.spelled);
    only(t, api.fields, api.endpoint);
    nlohmann::ordered_json function = {{"name", string_at(t, "name", where)}};
    if (t.contains("description")) function["description"] = t["description"];
    function["parameters"] = t.contains(api.schema) ? t[api.schema] : nlohmann::ordered_json::object();
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

}  // namespace kiln::serve
