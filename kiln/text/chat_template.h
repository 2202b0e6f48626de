// Chat templates: how a model spells a conversation as one prompt.
// A Hugging Face folder carries its template as Jinja source
// (tokenizer_config.json's chat_template, or chat_template.jinja), and Kiln
// runs it with its own Jinja engine (kiln/text/jinja) as transformers'
// apply_chat_template does: the program the file carries, not a family
// recognised from it. A few families also have built-in renderers, for
// folders that ship no template (--chat-template NAME), each checked
// against transformers' rendering of that family's real template.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::text::jinja {
class Template;
}

namespace kiln::text {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// What a template fills in besides the messages (the tokenizer's special
// tokens as text, as apply_chat_template passes them).
struct ChatTokens {
  std::string bos, eos;
};

class ChatTemplate {
 public:
  using Renderer = std::string (*)(const ChatTemplate&, const std::vector<ChatMessage>&, bool add_generation_prompt);

  // A family's built-in renderer.
  ChatTemplate(std::string name, std::string end_of_turn, Renderer render)
      : name_(std::move(name)), end_of_turn_(std::move(end_of_turn)), render_(render) {}
  // A template's Jinja source, parsed now: a syntax error is a kiln::Error
  // naming its line. `tool_use`: the template a model ships beside its
  // default for conversations with tools (Hermes', Command R's: transformers'
  // template named "tool_use", llama.cpp's tokenizer.chat_template.tool_use);
  // as both do, a render given a list of tools (even an empty one) runs it.
  static ChatTemplate from_jinja(const std::string& source, const std::string& tool_use = "");

  // "jinja" for a template's own program, else the family's name.
  const std::string& name() const { return name_; }
  bool is_jinja() const { return jinja_ != nullptr; }
  // The token text that ends an assistant turn for a family renderer; empty:
  // the tokenizer's eos (a Jinja template's turns end at the model's eos ids
  // and the tokenizer's eos token).
  const std::string& end_of_turn() const { return end_of_turn_; }
  // apply_chat_template(messages, tokenize=False, add_generation_prompt=...):
  // the text to encode without adding special tokens. A conversation the
  // template refuses (raise_exception, a system message where it has none)
  // is a kiln::Error with the template's message.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;
  // The same for messages as the chat API sends them (tool calls, names,
  // reasoning_content, content parts), with the request's tools (null: none)
  // and any extra template variables (enable_thinking, ...).
  std::string render_json(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                          bool add_generation_prompt,
                          const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  ChatTokens tokens;
  // A Jinja template's source, as the model's files hold it ("" for the named families).
  const std::string& source() const { return source_; }
  // strftime_now's clock (seconds since 1970); unset: now. Tests fix it.
  std::optional<int64_t> now_unix_seconds;

 private:
  std::string name_, end_of_turn_, source_;
  Renderer render_ = nullptr;
  std::shared_ptr<const jinja::Template> jinja_, tool_use_;  // tool_use_: null where the model has none
};

// The known templates' names: chatml, llama3, llama2, mistral, gemma, phi3, zephyr.
std::vector<std::string> chat_template_names();
// The same, as "chatml, llama3, ..." for messages and help.
std::string chat_template_list();
// A template by name (--chat-template NAME); an unknown name lists the known ones.
ChatTemplate chat_template_named(const std::string& name);

}  // namespace kiln::text
