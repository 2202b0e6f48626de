#include "apps/serve/access.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>

namespace kiln::serve {

namespace {

// An error's type by HTTP status, as OpenAI's API and Anthropic's spell it; a status not listed is a server
// error from 500 up and the request's fault below.
struct ErrorType {
  int status;
  const char* openai;
  const char* anthropic;
};
constexpr ErrorType kErrorTypes[] = {{401, "authentication_error", "authentication_error"},
                                     {404, "not_found_error", "not_found_error"},
                                     {413, "invalid_request_error", "request_too_large"},
                                     {503, "overloaded_error", "overloaded_error"},
                                     {504, "timeout_error", "api_error"}};

}  // namespace

std::string error_body(const std::string& message, int status, const std::string& endpoint) {
  auto dump = [](const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
  if (endpoint.starts_with("/api/")) return dump({{"error", message}});
  const bool anthropic = endpoint.starts_with("/v1/messages");
  const auto* listed = std::find_if(std::begin(kErrorTypes), std::end(kErrorTypes),
                                    [&](const ErrorType& e) { return e.status == status; });
  const char* type = listed != std::end(kErrorTypes) ? (anthropic ? listed->anthropic : listed->openai)
                     : status >= 500                 ? (anthropic ? "api_error" : "server_error")
                                                     : "invalid_request_error";
  if (anthropic) return dump({{"type", "error"}, {"error", {{"type", type}, {"message", message}}}});
  return dump({{"error", {{"message", message}, {"type", type}, {"code", status}}}});
}

bool carries_key(const httplib::Request& req, const std::vector<std::string>& keys) {
  const std::string bearer = req.get_header_value("Authorization");
  const std::string given = bearer.starts_with("Bearer ") ? bearer.substr(7) : req.get_header_value("x-api-key");
  bool found = false;
  for (const std::string& key : keys) {
    unsigned char differs = key.size() != given.size();
    for (size_t i = 0; i < key.size(); ++i) differs |= uint8_t(key[i]) ^ uint8_t(i < given.size() ? given[i] : 0);
    found |= differs == 0;
  }
  return found;
}

bool is_public(const httplib::Request& req) {
  static const char* const kPublic[] = {"/health", "/v1/health", "/v2/health/live", "/v2/health/ready", "/"};
  return req.method == "GET" &&
         std::any_of(std::begin(kPublic), std::end(kPublic), [&](const char* path) { return req.path == path; });
}

std::string allowed_origin(const std::string& origin, const std::string& allowed) {
  if (origin.empty() || allowed.empty()) return "";
  if (allowed == "*") return origin;
  if (allowed == "localhost") {
    for (const char* local : {"http://localhost", "https://localhost", "http://127.0.0.1", "https://127.0.0.1",
                              "http://[::1]", "https://[::1]"})
      if (origin == local || origin.starts_with(std::string(local) + ":")) return origin;
    return "";
  }
  for (size_t from = 0; from <= allowed.size();) {
    const size_t comma = std::min(allowed.find(',', from), allowed.size());
    std::string one = allowed.substr(from, comma - from);
    one.erase(0, one.find_first_not_of(' '));
    one.erase(one.find_last_not_of(' ') + 1);
    if (one == origin) return origin;
    from = comma + 1;
  }
  return "";
}

}  // namespace kiln::serve
