#include "apps/serve/ollama_answers.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace kiln::serve {
namespace {

using json = nlohmann::json;

int64_t nanoseconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

// "gguf:llama" -> format gguf, family llama; "hf:qwen2" -> safetensors, qwen2; a Kiln run's recipe -> kiln, it.
json details_of(const OllamaModel& m) {
  const size_t colon = m.source.find(':');
  const std::string format = colon == std::string::npos ? "kiln" : m.source.substr(0, colon);
  const std::string family = colon == std::string::npos ? m.source : m.source.substr(colon + 1);
  return {{"format", format == "hf" ? "safetensors" : format}, {"family", family}, {"families", {family}}};
}

}  // namespace

std::string ollama_time_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count() % 1000000000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[64];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<long long>(nanos));
  return text;
}

json ollama_tags(const std::vector<OllamaModel>& models) {
  json list = json::array();
  for (const OllamaModel& m : models)
    list.push_back({{"name", m.name},
                    {"model", m.name},
                    {"modified_at", m.loaded_at},
                    {"size", m.size},
                    {"details", details_of(m)}});
  return {{"models", list}};
}

json ollama_ps(const std::vector<OllamaModel>& models) {
  json list = json::array();
  for (const OllamaModel& m : models)
    list.push_back({{"name", m.name},
                    {"model", m.name},
                    {"size", m.size},
                    {"size_vram", m.on_gpu ? m.size : 0},
                    {"details", details_of(m)},
                    {"expires_at", "2318-08-20T00:00:00Z"},  // (Ollama's now + the longest duration, for keep_alive -1)
                    {"context_length", m.context_length}});
  return {{"models", list}};
}

json ollama_show(const OllamaModel& m) {
  json capabilities = json::array();
  if (m.embedder) capabilities.push_back("embedding");
  if (!m.embedder) capabilities.push_back("completion");
  if (m.tools) capabilities.push_back("tools");
  if (m.thinking) capabilities.push_back("thinking");
  const json details = details_of(m);
  const std::string arch = details["family"];
  return {{"template", m.chat_template},
          {"details", details},
          {"model_info", {{"general.architecture", arch}, {arch + ".context_length", m.context_length}}},
          {"capabilities", capabilities},
          {"modified_at", m.loaded_at}};
}

json ollama_piece(const std::string& model, bool chat, json fields) {
  json out = {{"model", model}, {"created_at", ollama_time_now()}};
  if (chat) {
    json message = {{"role", "assistant"}, {"content", ""}};
    message.update(fields);
    out["message"] = std::move(message);
  } else {
    out["response"] = "";
    out.update(fields);
  }
  out["done"] = false;
  return out;
}

json ollama_done(const std::string& model, bool chat, json fields, const recipes::Completion& c, const JobTimes& t) {
  json out = ollama_piece(model, chat, std::move(fields));
  out["done"] = true;
  out["done_reason"] = c.finish_reason;
  out["total_duration"] = nanoseconds(t.finished - t.arrived);
  out["load_duration"] = 0;  // the model was loaded when the server started
  out["prompt_eval_count"] = c.prompt_tokens;
  out["prompt_eval_duration"] = nanoseconds(t.first_token - t.prompt_started);
  out["eval_count"] = c.completion_tokens;
  out["eval_duration"] = nanoseconds(t.finished - t.first_token);
  return out;
}

json ollama_tool_calls(const std::vector<text::ToolCall>& calls) {
  json out = json::array();
  for (const text::ToolCall& call : calls) {
    json arguments = json::parse(call.arguments, nullptr, false);
    if (arguments.is_discarded()) arguments = json::object();  // the constraint makes calls' arguments JSON
    out.push_back({{"function", {{"name", call.name}, {"arguments", arguments}}}});
  }
  return out;
}

}  // namespace kiln::serve
