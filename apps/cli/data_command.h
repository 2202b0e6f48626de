// `kiln data NAME --out DIR`: writes a fine-tuning data set made from
// Debian's data as JSON Lines (apps/recipes/jsonl_datasets.h).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace kiln::cli {

// Returns the command's runner: -1 when the subcommand was not chosen.
std::function<int()> add_data_command(CLI::App& app);

}  // namespace kiln::cli
