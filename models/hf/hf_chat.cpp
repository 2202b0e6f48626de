#include "models/hf/hf_chat.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/io/gguf.h"
#include "kiln/io/text_file.h"
#include "kiln/text/gguf_vocab.h"
#include "models/hf/hf_model.h"

namespace kiln::models {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A special token as tokenizer_config.json writes it: a string, or an
// added-token object with its "content"; absent or null is no token.
std::string token_text(const json& config, const char* key, const fs::path& path) {
  if (!config.contains(key) || config[key].is_null()) return "";
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  KILN_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(), path.string(), ": \"", key,
             "\" is neither a string nor an object with a \"content\" string");
  return v["content"].get<std::string>();
}

// The template's source: chat_template.jinja, else chat_template.json's
// (a processor's, as Gemma 3's and other multimodal folders hold it), else
// tokenizer_config.json's chat_template.
std::string template_source(const fs::path& dir, const json& config, const fs::path& config_path) {
  if (fs::exists(dir / "chat_template.jinja")) return read_text_file((dir / "chat_template.jinja").string());
  if (fs::exists(dir / "chat_template.json")) {
    const fs::path path = dir / "chat_template.json";
    json processor;
    try {
      processor = json::parse(read_text_file(path.string()));
    } catch (const json::exception& e) {
      KILN_FAIL(path.string(), " is not valid JSON: ", e.what());
    }
    KILN_CHECK(processor.is_object() && processor.contains("chat_template") && processor["chat_template"].is_string(),
               path.string(), " holds no \"chat_template\" string");
    return processor["chat_template"].get<std::string>();
  }
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return "";
  const json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  KILN_CHECK(t.is_array(), config_path.string(), ": \"chat_template\" is neither a string nor a list of templates");
  for (const auto& named : t)
    if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
        named["template"].is_string())
      return named["template"].get<std::string>();
  KILN_FAIL(config_path.string(), ": \"chat_template\" lists no template named \"default\"");
}

}  // namespace

text::ChatTemplate load_hf_chat_template(const std::string& dir, const std::string& name) {
  if (is_gguf_file(dir)) {  // a GGUF file: its tokenizer.chat_template
    const text::GgufChatTemplate g = text::gguf_chat_template(GgufFile::open(dir).metadata());
    if (name.empty() && g.source.empty())
      KILN_FAIL("gguf:", dir, " has no chat template (tokenizer.chat_template); name one with --chat-template NAME (",
                text::chat_template_list(), ")");
    text::ChatTemplate t = name.empty() ? text::ChatTemplate::from_jinja(g.source) : text::chat_template_named(name);
    t.tokens = {g.bos_token, g.eos_token};
    return t;
  }
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  json config = json::object();
  if (fs::exists(config_path)) {
    try {
      config = json::parse(read_text_file(config_path.string()));
    } catch (const json::exception& e) {
      KILN_FAIL(config_path.string(), " is not valid JSON: ", e.what());
    }
    KILN_CHECK(config.is_object(), config_path.string(), " is not a JSON object");
  }
  text::ChatTemplate t = [&] {
    if (!name.empty()) return text::chat_template_named(name);
    const std::string source = template_source(dir, config, config_path);
    if (source.empty())
      KILN_FAIL("hf:", dir, " has no chat template (tokenizer_config.json's \"chat_template\" or "
                "chat_template.jinja); name one with --chat-template NAME (", text::chat_template_list(), ")");
    return text::ChatTemplate::from_jinja(source);
  }();
  t.tokens = {token_text(config, "bos_token", config_path), token_text(config, "eos_token", config_path)};
  return t;
}

}  // namespace kiln::models
