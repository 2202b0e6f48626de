// `kiln train`: its options and how it runs.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace kiln::cli {

// Adds `train` to `app`. The returned function runs it after parsing and
// returns the exit status, or -1 when another subcommand was chosen.
std::function<int()> add_train_command(CLI::App& app);

// One line to stdout, flushed (progress lines must reach logs as they happen).
void print_line(const std::string& line);

}  // namespace kiln::cli
