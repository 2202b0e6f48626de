// `kiln chat MODEL`: an interactive chat in the terminal with a Hugging Face
// language model, in its chat template (as the server's
// /v1/chat/completions renders it). Replies stream as they are made; the
// conversation is kept until /reset; Ctrl-C stops a reply, and at the
// prompt (or Ctrl-D) ends the chat.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace kiln::cli {

std::function<int()> add_chat_command(CLI::App& app);

}  // namespace kiln::cli
