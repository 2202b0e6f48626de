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

// A folder's templates: its default, and the one for conversations with
// tools where it has one ("" where not).
struct TemplateSources {
  std::string default_source, tool_use;
};

// As transformers reads them: chat_template.jinja (and
// additional_chat_templates/tool_use.jinja, where transformers 5 saves a
// second template), else chat_template.json's (a processor's, as Gemma 3's
// and other multimodal folders hold it), else tokenizer_config.json's
// chat_template: a string, or a list of named templates (Hermes', Command
// R's: "default" and "tool_use").
TemplateSources template_sources(const fs::path& dir, const json& config, const fs::path& config_path) {
  TemplateSources s;
  if (fs::exists(dir / "additional_chat_templates" / "tool_use.jinja"))
    s.tool_use = read_text_file((dir / "additional_chat_templates" / "tool_use.jinja").string());
  if (fs::exists(dir / "chat_template.jinja")) {
    s.default_source = read_text_file((dir / "chat_template.jinja").string());
    return s;
  }
  if (fs::exists(dir / "chat_template.json")) {
    const fs::path path = dir / "chat_template.json";
    const json processor = read_json_file(path.string());
    KILN_CHECK(processor.is_object() && processor.contains("chat_template") && processor["chat_template"].is_string(),
               path.string(), " holds no \"chat_template\" string");
    s.default_source = processor["chat_template"].get<std::string>();
    return s;
  }
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return s;
  const json& t = config["chat_template"];
  if (t.is_string()) {
    s.default_source = t.get<std::string>();
    return s;
  }
  KILN_CHECK(t.is_array(), config_path.string(), ": \"chat_template\" is neither a string nor a list of templates");
  for (const auto& named : t)
    if (named.is_object() && named.contains("template") && named["template"].is_string()) {
      const std::string name = named.value("name", "");
      if (name == "default") s.default_source = named["template"].get<std::string>();
      if (name == "tool_use" && s.tool_use.empty()) s.tool_use = named["template"].get<std::string>();
    }
  KILN_CHECK(!s.default_source.empty(), config_path.string(),
             ": \"chat_template\" lists no template named \"default\"");
  return s;
}

json tokenizer_config(const fs::path& path) {
  if (!fs::exists(path)) return json::object();
  const json config = read_json_file(path.string());
  KILN_CHECK(config.is_object(), path.string(), " is not a JSON object");
  return config;
}

}  // namespace

text::ChatTemplate load_hf_chat_template(const std::string& dir, const std::string& name) {
  if (is_gguf_file(dir)) {  // a GGUF file: its tokenizer.chat_template
    const text::GgufChatTemplate g = text::gguf_chat_template(GgufFile::open(dir).metadata());
    if (name.empty() && g.source.empty())
      KILN_FAIL("gguf:", dir, " has no chat template (tokenizer.chat_template); name one with --chat-template NAME (",
                text::chat_template_list(), ")");
    text::ChatTemplate t =
        name.empty() ? text::ChatTemplate::from_jinja(g.source, g.tool_use) : text::chat_template_named(name);
    t.tokens = {g.bos_token, g.eos_token};
    return t;
  }
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  const json config = tokenizer_config(config_path);
  text::ChatTemplate t = [&] {
    if (!name.empty()) return text::chat_template_named(name);
    const TemplateSources sources = template_sources(dir, config, config_path);
    if (sources.default_source.empty())
      KILN_FAIL("hf:", dir, " has no chat template (tokenizer_config.json's \"chat_template\" or "
                "chat_template.jinja); name one with --chat-template NAME (", text::chat_template_list(), ")");
    return text::ChatTemplate::from_jinja(sources.default_source, sources.tool_use);
  }();
  t.tokens = {token_text(config, "bos_token", config_path), token_text(config, "eos_token", config_path)};
  return t;
}

json folder_chat_templates(const std::string& dir) {
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  const TemplateSources sources = template_sources(dir, tokenizer_config(config_path), config_path);
  return chat_templates_config(sources.default_source, sources.tool_use);
}

json chat_templates_config(const std::string& default_source, const std::string& tool_use) {
  if (default_source.empty()) return nullptr;
  if (tool_use.empty()) return default_source;
  return json::array(
      {{{"name", "default"}, {"template", default_source}}, {{"name", "tool_use"}, {"template", tool_use}}});
}

}  // namespace kiln::models
