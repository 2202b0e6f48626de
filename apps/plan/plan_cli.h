// The `kiln plan` subcommand: options, help text and output.
#pragma once
#include <CLI/CLI.hpp>

namespace kiln::plan {

// Adds `plan` to `app`; the returned callback runs it after parsing
// (returns the exit code).
std::function<int()> add_plan_command(CLI::App& app);

// "10B", "2.5e9", "300M", "64k" -> a count.
double parse_count(const std::string& text);

}  // namespace kiln::plan
