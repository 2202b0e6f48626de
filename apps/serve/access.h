// Who may call kiln serve (API keys, CORS origins: ServeOptions), and how a refusal, or any error, is spelled
// for the API the endpoint speaks.
#pragma once
#include <httplib.h>

#include <string>
#include <vector>

namespace kiln::serve {

// OpenAI's error shape, {"error": {"message", "type", "code"}}, with the HTTP status as the code and OpenAI's type
// for it; Anthropic's ({"type": "error", "error": {"type", "message"}}) under /v1/messages; Ollama's
// ({"error": message}) under /api/.
std::string error_body(const std::string& message, int status, const std::string& endpoint = "");

// Whether `req` carries one of `keys` (Authorization: Bearer KEY, or x-api-key: KEY), each compared in time
// that does not depend on where a guess first differs.
bool carries_key(const httplib::Request& req, const std::vector<std::string>& keys);

// What answers without a key: the health probes (load balancers, Kubernetes) and the page itself.
bool is_public(const httplib::Request& req);

// The Access-Control-Allow-Origin a request from `origin` gets under `allowed` (ServeOptions::cors_origins):
// the origin itself where it may call ("" where not), so that a page may send its key too.
std::string allowed_origin(const std::string& origin, const std::string& allowed);

}  // namespace kiln::serve
