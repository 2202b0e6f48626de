// Ollama's answers (`ollama serve`'s /api/chat and /api/generate): a line
// per piece of a stream (NDJSON), and the last, or the whole answer, with
// "done": true, the done_reason and the counts and durations it measured.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/recipes/inference.h"
#include "apps/serve/generation.h"
#include "kiln/text/tool_calls.h"

namespace kiln::serve {

// `fields`: /api/chat's message fields ({"content"}, {"thinking"}, {"tool_calls"}), or /api/generate's own
// ({"response"}, {"thinking"}).
nlohmann::json ollama_piece(const std::string& model, bool chat, nlohmann::json fields);
// The last line (`fields` of the whole answer, or empty ones after a stream): done_reason "stop" or "length",
// prompt_eval_count and eval_count, and the durations in nanoseconds: total (from arrival), the prompt's (to
// the first token) and the answer's (from it).
nlohmann::json ollama_done(const std::string& model, bool chat, nlohmann::json fields, const recipes::Completion& c,
                           const JobTimes& times);
// What /api/tags and /api/show say of a served model.
struct OllamaModel {
  std::string name;
  std::string source;  // the load line's "gguf:llama", "hf:qwen2": the format and the family
  bool embedder = false;
  int64_t context_length = 0;
  std::string chat_template;  // its Jinja source ("" for none)
  bool tools = false, thinking = false;
  std::string loaded_at;  // RFC 3339
  int64_t size = 0;       // its weights' bytes on disk
  bool on_gpu = false;
};
// GET /api/tags: {"models": [{"name", "model", "modified_at", "size", "details": {"format", "family", "families"}}]}.
nlohmann::json ollama_tags(const std::vector<OllamaModel>& models);
// GET /api/ps, the models in memory (every served one, held until the server stops): {"models": [{"name",
// "model", "size", "size_vram" (its size on a GPU, else 0), "details", "expires_at" (Ollama's for a model kept
// forever, keep_alive -1), "context_length"}]}.
nlohmann::json ollama_ps(const std::vector<OllamaModel>& models);
// POST /api/show: {"template", "details", "model_info": {"general.architecture", "<arch>.context_length"},
// "capabilities": completion, tools, thinking or embedding}.
nlohmann::json ollama_show(const OllamaModel& model);
// Now in RFC 3339, as Ollama's times are written: 2026-11-30T17:22:45.123456789Z.
std::string ollama_time_now();

// Tool calls as Ollama spells them: [{"function": {"name", "arguments": {...}}}].
nlohmann::json ollama_tool_calls(const std::vector<text::ToolCall>& calls);

}  // namespace kiln::serve
