// `kiln tokenize`, `kiln score`, `kiln perplexity`, `kiln classify` and `kiln embed`: what a
// model's tokenizer, its probabilities and its embeddings say about a text,
// for a run directory, hf:DIR or gguf:FILE.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace kiln::cli {

// Each adds its subcommand; the returned function runs it if it was given
// (returning its exit status) and returns -1 otherwise.
std::function<int()> add_tokenize_command(CLI::App& app);
std::function<int()> add_score_command(CLI::App& app);
std::function<int()> add_perplexity_command(CLI::App& app);
std::function<int()> add_classify_command(CLI::App& app);
std::function<int()> add_embed_command(CLI::App& app);

}  // namespace kiln::cli
