// `kiln export`: a run or a loaded model as a folder other tools load.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace kiln::cli {

// Adds the subcommand; the returned function runs it if it was given
// (returning its exit status) and returns -1 otherwise.
std::function<int()> add_export_command(CLI::App& app);

}  // namespace kiln::cli
