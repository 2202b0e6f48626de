// The chat template of a Hugging Face folder: tokenizer_config.json's
// "chat_template" (a string, or a list of named templates whose "default"
// is taken) or chat_template.jinja beside it, as transformers reads them,
// with the bos/eos token text the template fills in; or a GGUF file's
// tokenizer.chat_template, with the text of its bos and eos ids.
#pragma once
#include <string>

#include "kiln/text/chat_template.h"

namespace kiln::models {

// The folder's template, run by Kiln's Jinja engine; `name` (--chat-template)
// picks a built-in family renderer instead. No template and no name is an
// error that says how to name one.
text::ChatTemplate load_hf_chat_template(const std::string& dir, const std::string& name = "");

}  // namespace kiln::models
