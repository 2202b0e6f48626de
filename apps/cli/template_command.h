// `kiln apply-template`: the text a model is shown for a conversation, as
// its chat template renders it (transformers' apply_chat_template with
// tokenize=False, llama-server's /apply-template).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace kiln::cli {

// Adds the subcommand; the returned function runs it if it was given
// (returning its exit status) and returns -1 otherwise.
std::function<int()> add_apply_template_command(CLI::App& app);

}  // namespace kiln::cli
