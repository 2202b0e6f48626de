#include "kiln/text/chat_template.h"

#include <algorithm>

#include "kiln/core/error.h"
#include "kiln/text/utf8.h"

namespace kiln::text {
namespace {

using Messages = std::vector<ChatMessage>;

// Python's str.strip() (Jinja's trim and .strip()): Unicode whitespace at both ends.
bool python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}
std::string strip(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end) {
    const size_t n = utf8_char_length(s, begin);
    if (n == 0 || !python_space(utf8_decode_at(s, begin))) break;
    begin += n;
  }
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (uint8_t(s[start]) & 0xc0) == 0x80) --start;
    if (utf8_char_length(s, start) != end - start || !python_space(utf8_decode_at(s, start))) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

[[noreturn]] void refuse(const ChatTemplate& t, const std::string& what) {
  KILN_FAIL("chat template '", t.name(), "': ", what);
}
// Llama 2's, Mistral's and Gemma's templates raise this for user/assistant turns out of order.
void check_alternates(const ChatTemplate& t, const ChatMessage& m, size_t index) {
  if ((m.role == "user") != (index % 2 == 0))
    refuse(t, "Conversation roles must alternate user/assistant/user/assistant/... (message " +
                  std::to_string(index + 1) + " is '" + m.role + "')");
}

std::string render_chatml(const ChatTemplate& t, const Messages& ms, bool gen) {
  std::string out;
  if (!t.default_system.empty() && !ms.empty() && ms[0].role != "system")
    out += "<|im_start|>system\n" + t.default_system + "<|im_end|>\n";
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
    if (m.role == "assistant") out += " " + strip(content) + " " + t.tokens.eos;
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

// A family: its renderer, the token that ends an assistant turn, and how to
// recognise its Jinja source (every `marks` substring, none of `unlike`:
// the later templates of a family that render differently).
struct Family {
  const char* name;
  const char* end_of_turn;
  ChatTemplate::Renderer render;
  std::vector<std::string> marks, unlike;
};

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {"chatml", "<|im_end|>", render_chatml, {"<|im_start|>"}, {}},
      {"llama3", "<|eot_id|>", render_llama3, {"<|start_header_id|>", "<|eot_id|>"}, {"Cutting Knowledge Date"}},
      {"llama2", "", render_llama2, {"[INST]", "<<SYS>>"}, {}},
      {"mistral", "", render_mistral, {"[INST]"}, {"<<SYS>>", "system_message", "AVAILABLE_TOOLS"}},
      {"gemma", "<end_of_turn>", render_gemma, {"<start_of_turn>"}, {}},
      {"phi3", "<|end|>", render_phi3, {"<|user|>", "<|end|>"}, {}},
      {"zephyr", "", render_zephyr, {"<|user|>", "<|assistant|>", "eos_token"}, {"<|end|>"}},
  };
  return table;
}

ChatTemplate make(const Family& f) { return ChatTemplate(f.name, f.end_of_turn, f.render); }

// The system turn a ChatML template writes when a conversation has none:
// the text of its literal '<|im_start|>system\n...<|im_end|>' (Qwen's
// "You are a helpful assistant."). Jinja's string escapes are undone.
std::string chatml_default_system(const std::string& source) {
  const std::string open = "<|im_start|>system\\n";
  const size_t at = source.find(open);
  if (at == std::string::npos) return "";
  const size_t begin = at + open.size(), end = source.find("<|im_end|>", begin);
  if (end == std::string::npos) return "";
  const std::string literal = source.substr(begin, end - begin);
  // Only a literal belongs here: a Jinja expression (the conversation's own system message) does not.
  if (literal.find_first_of("'\"{}+") != std::string::npos) return "";
  std::string text;
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'n') {
      text += '\n';
      ++i;
    } else {
      text += literal[i];
    }
  }
  return text;
}

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

ChatTemplate recognise_chat_template(const std::string& source) {
  auto has = [&](const std::string& s) { return source.find(s) != std::string::npos; };
  for (const auto& f : families()) {
    if (!std::all_of(f.marks.begin(), f.marks.end(), has) || std::any_of(f.unlike.begin(), f.unlike.end(), has))
      continue;
    ChatTemplate t = make(f);
    if (t.name() == "chatml") t.default_system = chatml_default_system(source);
    return t;
  }
  KILN_FAIL("the model's chat template is not one Kiln knows (it renders ", chat_template_list(),
            "); name the family with --chat-template NAME if its conversations are spelled like one of them");
}

}  // namespace kiln::text
