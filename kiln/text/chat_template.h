// Chat templates: how a model family spells a conversation as one prompt.
// A Hugging Face folder carries its template as Jinja source
// (tokenizer_config.json's chat_template, or chat_template.jinja), which
// transformers runs with apply_chat_template. Kiln does not run Jinja: it
// recognises the family from the source and renders the conversation with
// that family's own renderer (as llama.cpp's llm_chat_apply_template does),
// each checked against transformers' rendering of the real template
// (tests/hf/make_fixtures.py). A template Kiln does not recognise is an
// error that lists the known ones; nothing falls back silently.
#pragma once
#include <string>
#include <vector>

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

  ChatTemplate(std::string name, std::string end_of_turn, Renderer render)
      : name_(std::move(name)), end_of_turn_(std::move(end_of_turn)), render_(render) {}

  const std::string& name() const { return name_; }
  // The token text that ends an assistant turn; empty: the tokenizer's eos.
  const std::string& end_of_turn() const { return end_of_turn_; }
  // apply_chat_template(messages, tokenize=False, add_generation_prompt=...):
  // the text to encode without adding special tokens. A conversation the
  // family's template refuses (a system message where it has none, roles
  // that do not alternate) is a kiln::Error saying so.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const {
    return render_(*this, messages, add_generation_prompt);
  }

  ChatTokens tokens;
  std::string default_system;  // a system turn the template adds when the conversation has none (Qwen's)

 private:
  std::string name_, end_of_turn_;
  Renderer render_;
};

// The known templates' names: chatml, llama3, llama2, mistral, gemma, phi3, zephyr.
std::vector<std::string> chat_template_names();
// The same, as "chatml, llama3, ..." for messages and help.
std::string chat_template_list();
// A template by name (--chat-template NAME); an unknown name lists the known ones.
ChatTemplate chat_template_named(const std::string& name);
// The family of a Jinja template's source; an error naming the known ones
// (and --chat-template) when it is none of them.
ChatTemplate recognise_chat_template(const std::string& jinja_source);

}  // namespace kiln::text
