#include "apps/serve/ollama_requests.h"

#include <algorithm>
#include <deque>
#include <random>

#include "apps/serve/request_fields.h"

namespace kiln::serve {
namespace {

using json = nlohmann::ordered_json;

// options -> the OpenAI body's sampling fields.
void read_options(const json& body, json& out) {
  if (!body.contains("options")) return;
  const json& o = body["options"];
  if (!o.is_object()) throw HttpError(400, "'options' must be an object of Ollama's parameters");
  static const char* const kSampling[] = {"temperature",
                                          "top_k",
                                          "top_p",
                                          "min_p",
                                          "seed",
                                          "stop",
                                          "repeat_penalty",
                                          "repeat_last_n",
                                          "presence_penalty",
                                          "frequency_penalty"};
  // The runner's: how Ollama loads and runs the model, which Kiln's command line sets.
  static const char* const kRunner[] = {"num_ctx",    "num_batch",  "num_gpu",         "main_gpu", "use_mmap",
                                        "use_mlock",  "num_thread", "num_keep",        "low_vram", "numa",
                                        "vocab_only", "f16_kv",     "penalize_newline"};
  static const std::pair<const char*, double> kOff[] = {{"mirostat", 0}, {"typical_p", 1}, {"tfs_z", 1}};
  for (auto it = o.begin(); it != o.end(); ++it) {
    const std::string key = it.key();
    const json& value = it.value();
    if (value.is_null()) continue;
    if (std::any_of(std::begin(kSampling), std::end(kSampling), [&](const char* k) { return key == k; })) {
      out[key] = value;
    } else if (key == "num_predict") {
      if (!value.is_number_integer() || value.get<int64_t>() < -2 || value.get<int64_t>() == 0 ||
          value.get<int64_t>() > 4096)
        throw HttpError(400,
                        "options.num_predict must be -1 (until the end of the answer, up to 4096) or in [1, 4096]");
      out["max_tokens"] = value.get<int64_t>() < 0 ? int64_t(4096) : value.get<int64_t>();
    } else if (std::none_of(std::begin(kRunner), std::end(kRunner), [&](const char* k) { return key == k; })) {
      const auto off = std::find_if(std::begin(kOff), std::end(kOff), [&](const auto& p) { return key == p.first; });
      if (off == std::end(kOff)) throw HttpError(400, "unknown option '" + key + "'");
      if (!value.is_number() || value.get<double>() != off->second)
        throw HttpError(400, "option '" + key + "' is not supported: Kiln has no such sampler (leave it at " +
                                 json(off->second).dump() + ")");
    }
  }
}

// What /api/chat and /api/generate share: format, options, stream, think.
json openai_body(const json& body) {
  json out = {{"model", body.contains("model") ? body["model"] : json("")}};
  if (!out["model"].is_string() || out["model"].get<std::string>().empty())
    throw HttpError(400, "'model' must name a served model");
  out["stream"] = body.value("stream", json(true));  // Ollama streams unless told not to
  read_options(body, out);
  if (!out.contains("max_tokens")) out["max_tokens"] = 4096;  // Ollama's num_predict -1
  // Ollama draws a seed when none is given.
  if (!out.contains("seed")) out["seed"] = uint64_t(std::random_device{}()) << 32 | std::random_device{}();
  if (body.contains("format")) {
    const json& f = body["format"];
    if (f == "json")
      out["response_format"] = {{"type", "json_object"}};
    else if (f.is_object())
      out["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "format"}, {"schema", f}}}};
    else if (f != "")
      throw HttpError(400, "'format' must be \"json\" or a JSON schema");
  }
  if (body.contains("think")) {
    if (!body["think"].is_boolean()) throw HttpError(400, "'think' must be true or false");
    if (!body["think"].get<bool>()) out["chat_template_kwargs"] = {{"enable_thinking", false}};
  }
  return out;
}

// Ollama's messages as OpenAI's: tool calls get ids ("call_N", in order), and a tool message answers the first of
// the calls before it that none has answered yet (Ollama's carry the tool's name, not a call id).
json openai_messages(const json& messages) {
  if (!messages.is_array()) throw HttpError(400, "'messages' must be an array of {\"role\", \"content\"} objects");
  json out = json::array();
  std::deque<std::string> unanswered;
  int calls = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!messages[i].is_object()) throw HttpError(400, where + " is not an object");
    json m = messages[i];
    for (auto it = m.begin(); it != m.end();) it = it->is_null() ? m.erase(it) : std::next(it);
    if (m.contains("images") && !(m["images"].is_array() && m["images"].empty()))
      throw HttpError(400, where + ".images: Kiln serves text models; send the text alone");
    m.erase("images");
    if (m.contains("thinking")) {
      m["reasoning_content"] = m["thinking"];
      m.erase("thinking");
    }
    if (m.contains("tool_calls") && m["tool_calls"].is_array())
      for (json& call : m["tool_calls"]) {
        if (!call.is_object()) continue;  // parse_chat names what is wrong
        call["id"] = "call_" + std::to_string(calls++);
        call["type"] = "function";
        unanswered.push_back(call["id"]);
      }
    if (m.contains("role") && m["role"] == "tool") {
      if (m.contains("tool_name")) m["name"] = m["tool_name"];
      m.erase("tool_name");
      m["tool_call_id"] = unanswered.empty() ? "call_" + std::to_string(std::max(0, calls - 1)) : unanswered.front();
      if (!unanswered.empty()) unanswered.pop_front();
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

ChatRequest parse_ollama_chat(const std::string& text) {
  const json body = object_of(text);
  only(body, {"model", "messages", "tools", "format", "options", "stream", "think", "keep_alive"}, "/api/chat");
  json chat = openai_body(body);
  chat["messages"] = openai_messages(body.value("messages", json()));
  if (body.contains("tools")) chat["tools"] = body["tools"];
  return parse_chat(chat.dump());
}

OllamaGenerateRequest parse_ollama_generate(const std::string& text) {
  const json body = object_of(text);
  only(body,
       {"model", "prompt", "system", "raw", "format", "options", "stream", "think", "keep_alive", "context", "images",
        "suffix", "template"},
       "/api/generate");
  for (const char* field : {"context", "images", "suffix", "template"})
    if (body.contains(field) && body[field] != json::array() && body[field] != "")
      throw HttpError(400, std::string("field '") + field + "' is not supported: " +
                               (std::string(field) == "context"  ? "send the conversation to /api/chat"
                                : std::string(field) == "images" ? "Kiln serves text models"
                                : std::string(field) == "suffix" ? "Kiln does not fill in the middle"
                                                                 : "the model's own chat template is used"));
  OllamaGenerateRequest r;
  if (body.contains("raw") && !body["raw"].is_boolean()) throw HttpError(400, "'raw' must be true or false");
  r.raw = body.value("raw", false);
  if (body.contains("prompt") && !body["prompt"].is_string()) throw HttpError(400, "'prompt' must be a string");
  r.prompt = body.value("prompt", "");
  json chat = openai_body(body);
  json messages = json::array();
  if (body.contains("system")) messages.push_back({{"role", "system"}, {"content", body["system"]}});
  messages.push_back({{"role", "user"}, {"content", r.prompt}});
  chat["messages"] = messages;
  r.chat = parse_chat(chat.dump());
  return r;
}

EmbeddingsRequest parse_ollama_embed(const std::string& text, bool older) {
  const json body = object_of(text);
  json openai = {{"model", body.value("model", json(""))}};
  if (older) {
    only(body, {"model", "prompt", "options", "keep_alive"}, "/api/embeddings");
    openai["input"] = body.value("prompt", json(""));
  } else {
    only(body, {"model", "input", "truncate", "dimensions", "options", "keep_alive"}, "/api/embed");
    if (!body.contains("input")) throw HttpError(400, "'input' must be a text or a list of texts");
    openai["input"] = body["input"];
    if (body.contains("dimensions")) openai["dimensions"] = body["dimensions"];
  }
  EmbeddingsRequest r = parse_embeddings(openai.dump());
  if (!older) {
    const json truncate = body.value("truncate", json(true));
    if (!truncate.is_boolean()) throw HttpError(400, "'truncate' must be true or false");
    r.truncate = truncate.get<bool>();  // false: a text past the model's length is an error
    r.normalization = 2;                // /api/embed's are L2-normalised, as Ollama's
  }
  return r;
}

}  // namespace kiln::serve
