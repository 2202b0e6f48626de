// What the translating parsers (Ollama's and Anthropic's requests, read
// into the OpenAI endpoints' bodies) share: the body as a JSON object with
// its null fields dropped, and a refusal of fields the endpoint does not take.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/serve/requests.h"

namespace kiln::serve {

// ordered: a tool's schema and a call's arguments reach the template in the order the client wrote them
inline nlohmann::ordered_json object_of(const std::string& text) {
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) throw HttpError(400, "the request body is not a JSON object");
  for (auto it = body.begin(); it != body.end();) it = it->is_null() ? body.erase(it) : std::next(it);
  return body;
}

inline void only(const nlohmann::ordered_json& body, std::initializer_list<const char*> known,
                 const std::string& endpoint) {
  for (auto it = body.begin(); it != body.end(); ++it)
    if (const std::string key = it.key();
        std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; }))
      throw HttpError(400, "unknown field '" + key + "' (see docs/SERVING.md for the fields " + endpoint + " takes)");
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
