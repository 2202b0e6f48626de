// The chat template of a Hugging Face folder: tokenizer_config.json's
// "chat_template" (a string, or a list of named templates whose "default"
// is taken, and "tool_use" for conversations with tools) or
// chat_template.jinja beside it, as transformers reads them, with the
// bos/eos token text the template fills in; or a GGUF file's
// tokenizer.chat_template (and .tool_use), with the text of its bos and eos ids.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/text/chat_template.h"

namespace kiln::models {

// The folder's template, run by Kiln's Jinja engine; `name` (--chat-template)
// picks a built-in family renderer instead. No template and no name is an
// error that says how to name one.
text::ChatTemplate load_hf_chat_template(const std::string& dir, const std::string& name = "");

// The folder's templates as tokenizer_config.json's "chat_template" holds
// them, wherever the folder keeps them: the default's text, or a list of
// {"name", "template"} of "default" and "tool_use"; null where it has none.
// What an export writes: a folder's tokenizer_config.json, a GGUF file's
// tokenizer.chat_template and .tool_use (as llama.cpp's converter takes a
// folder's chat_template.jinja and additional_chat_templates).
nlohmann::json folder_chat_templates(const std::string& dir);
// That form of a default template and a tool_use one ("": none).
nlohmann::json chat_templates_config(const std::string& default_source, const std::string& tool_use);

}  // namespace kiln::models
