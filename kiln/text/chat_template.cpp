#include "kiln/text/chat_template.h"

#include <algorithm>

#include "kiln/core/error.h"
#include "kiln/text/jinja/builtins.h"
#include "kiln/text/jinja/template.h"

namespace kiln::text {
namespace {

using Messages = std::vector<ChatMessage>;

// Python's str.strip() (Jinja's trim and .strip()): Unicode whitespace at both ends.
std::string strip(const std::string& s) { return jinja::python_strip(s, nullptr, true, true); }

[[noreturn]] void refuse(const ChatTemplate& t, const std::string& what) {
  KILN_FAIL("chat template '", t.name(), "': ", what);
}
// Llama 2's, Mistral's and Gemma's templates raise this for user/assistant turns out of order.
void check_alternates(const ChatTemplate& t, const ChatMessage& m, size_t index) {
  if ((m.role == "user") != (index % 2 == 0))
    refuse(t, "Conversation roles must alternate user/assistant/user/assistant/... (message " +
                  std::to_string(index + 1) + " is '" + m.role + "')");
}

std::string render_chatml(const ChatTemplate&, const Messages& ms, bool gen) {
  std::string out;
  for (const auto& m : ms) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

// The system message folds into the first user turn; no generation prompt.
std::string render_llama2(const ChatTemplate& t, const Messages& ms, bool) {
  const bool has_system = !ms.empty() && ms[0].role == "system";
  std::string out;
  for (size_t i = has_system ? 1 : 0, n = 0; i < ms.size(); ++i, ++n) {
    const ChatMessage& m = ms[i];
    check_alternates(t, m, n);
    const std::string content =
        n == 0 && has_system ? "<<SYS>>\n" + ms[0].content + "\n<</SYS>>\n\n" + m.content : m.content;
    if (m.role == "user") out += t.tokens.bos + "[INST] " + strip(content) + " [/INST]";
    if (m.role == "assistant") out.append(" ").append(strip(content)).append(" ").append(t.tokens.eos);
  }
  return out;
}

std::string render_llama3(const ChatTemplate& t, const Messages& ms, bool gen) {
  std::string out;
  for (size_t i = 0; i < ms.size(); ++i)
    out += (i == 0 ? t.tokens.bos : "") + "<|start_header_id|>" + ms[i].role + "<|end_header_id|>\n\n" +
           strip(ms[i].content) + "<|eot_id|>";
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Mistral Instruct v0.1/v0.2: user and assistant turns only.
std::string render_mistral(const ChatTemplate& t, const Messages& ms, bool) {
  std::string out = t.tokens.bos;
  for (size_t i = 0; i < ms.size(); ++i) {
    check_alternates(t, ms[i], i);
    if (ms[i].role == "user")
      out += "[INST] " + ms[i].content + " [/INST]";
    else if (ms[i].role == "assistant")
      out += ms[i].content + t.tokens.eos;
    else
      refuse(t, "Only user and assistant roles are supported! (message " + std::to_string(i + 1) + " is '" +
                    ms[i].role + "')");
  }
  return out;
}

// Zephyr and TinyLlama-Chat.
std::string render_zephyr(const ChatTemplate& t, const Messages& ms, bool gen) {
  std::string out;
  for (const auto& m : ms)
    if (m.role == "user" || m.role == "system" || m.role == "assistant")
      out += "<|" + m.role + "|>\n" + m.content + t.tokens.eos + "\n";
  if (gen && !ms.empty()) out += "<|assistant|>\n";
  return out;
}

std::string render_gemma(const ChatTemplate& t, const Messages& ms, bool gen) {
  if (!ms.empty() && ms[0].role == "system") refuse(t, "System role not supported");
  std::string out = t.tokens.bos;
  for (size_t i = 0; i < ms.size(); ++i) {
    check_alternates(t, ms[i], i);
    const std::string role = ms[i].role == "assistant" ? "model" : ms[i].role;
    out += "<start_of_turn>" + role + "\n" + strip(ms[i].content) + "<end_of_turn>\n";
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}

std::string render_phi3(const ChatTemplate& t, const Messages& ms, bool gen) {
  std::string out;
  for (const auto& m : ms)
    if (m.role == "user" || m.role == "system" || m.role == "assistant")
      out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  out += gen ? "<|assistant|>\n" : t.tokens.eos;
  return out;
}

// A family: its renderer and the token that ends an assistant turn.
struct Family {
  const char* name;
  const char* end_of_turn;
  ChatTemplate::Renderer render;
};

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {"chatml", "<|im_end|>", render_chatml},
      {"llama3", "<|eot_id|>", render_llama3},
      {"llama2", "", render_llama2},
      {"mistral", "", render_mistral},
      {"gemma", "<end_of_turn>", render_gemma},
      {"phi3", "<|end|>", render_phi3},
      {"zephyr", "", render_zephyr},
  };
  return table;
}

ChatTemplate make(const Family& f) { return ChatTemplate(f.name, f.end_of_turn, f.render); }

}  // namespace

std::vector<std::string> chat_template_names() {
  std::vector<std::string> names;
  for (const auto& f : families()) names.push_back(f.name);
  return names;
}

std::string chat_template_list() {
  std::string names;
  for (const auto& f : families()) names += (names.empty() ? "" : ", ") + std::string(f.name);
  return names;
}

ChatTemplate chat_template_named(const std::string& name) {
  for (const auto& f : families())
    if (name == f.name) return make(f);
  KILN_FAIL("unknown chat template '", name, "'; the known ones are ", chat_template_list());
}

ChatTemplate ChatTemplate::from_jinja(const std::string& source, const std::string& tool_use) {
  ChatTemplate t("jinja", "", nullptr);
  t.jinja_ = std::make_shared<const jinja::Template>(source);
  t.source_ = source;
  if (!tool_use.empty()) t.tool_use_ = std::make_shared<const jinja::Template>(tool_use);
  return t;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  if (!jinja_) return render_(*this, messages, add_generation_prompt);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return render_json(list, nullptr, add_generation_prompt);
}

std::string ChatTemplate::render_json(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                      bool add_generation_prompt, const nlohmann::ordered_json& extra) const {
  if (!jinja_) {
    std::vector<ChatMessage> plain;
    for (const auto& m : messages) {
      KILN_CHECK(m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content") &&
                     m["content"].is_string(),
                 "chat template '", name_, "' takes messages with a role and text content only");
      plain.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    KILN_CHECK(tools.is_null() || tools.empty(), "chat template '", name_,
               "' has no tools; use the model's own Jinja template");
    return render_(*this, plain, add_generation_prompt);
  }
  // What transformers' render_jinja_template passes: keys whose value is
  // None dropped, reasoning under both names templates read, the special tokens.
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& m : messages) {
    KILN_CHECK(m.is_object(), "a chat message must be an object, not ", m.dump());
    nlohmann::ordered_json copy = nlohmann::ordered_json::object();
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!it.value().is_null()) copy[it.key()] = it.value();
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      if (!copy.contains(key)) continue;
      const auto reasoning = copy[key];
      nlohmann::ordered_json aliased = {{"thinking", reasoning}};
      for (auto it = copy.begin(); it != copy.end(); ++it)
        if (it.key() != "thinking") aliased[it.key()] = it.value();
      aliased["reasoning_content"] = reasoning;
      copy = aliased;
      break;
    }
    list.push_back(std::move(copy));
  }
  nlohmann::ordered_json context = {{"messages", list},          {"tools", tools},
                                    {"documents", nullptr},      {"add_generation_prompt", add_generation_prompt},
                                    {"bos_token", tokens.bos},   {"eos_token", tokens.eos}};
  for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
  jinja::RenderOptions options;
  options.now_unix_seconds = now_unix_seconds;
  return (tools.is_array() && tool_use_ ? *tool_use_ : *jinja_).render(context, options);
}

}  // namespace kiln::text
