// `kiln train`: its options and how it runs.
#pragma once
#include <functional>
#include <optional>

#include <CLI/CLI.hpp>

#include "apps/recipes/recipe.h"

namespace kiln::cli {

// Adds `train` and its options to `app`. After parsing, the returned function
// gives the options as given (nullopt when another subcommand was chosen).
std::function<std::optional<recipes::TrainOptions>()> add_train_options(CLI::App& app);

// Trains as `kiln train` does: --fit's choice, bf16's fallback on CPUs
// without it, then the recipe.
recipes::TrainResult run_train(recipes::TrainOptions options, const recipes::Log& log);

// Adds `train` to `app`. The returned function runs it after parsing and
// returns the exit status, or -1 when another subcommand was chosen.
std::function<int()> add_train_command(CLI::App& app);

// One line to stdout, flushed (progress lines must reach logs as they happen).
void print_line(const std::string& line);

}  // namespace kiln::cli
