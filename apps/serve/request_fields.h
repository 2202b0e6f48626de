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

}  // namespace kiln::serve
