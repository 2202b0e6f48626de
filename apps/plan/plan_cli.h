// The `kiln plan` subcommand: options, help text and output.
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kiln::plan {

// What `kiln plan` found: the JSON --json prints, the text it prints
// otherwise, and its exit code (2: nothing fits).
struct PlanOutcome {
  nlohmann::json json;
  std::string text;
  int exit_code = 0;
};

// Adds `plan` and its options (all but --json) to `app`; after parsing, the
// returned function plans (nullopt when another subcommand was chosen).
std::function<std::optional<PlanOutcome>()> add_plan_options(CLI::App& app);

// Adds `plan` to `app`; the returned callback runs it after parsing
// (returns the exit code).
std::function<int()> add_plan_command(CLI::App& app);

// "10B", "2.5e9", "300M", "64k" -> a count.
double parse_count(const std::string& text);

}  // namespace kiln::plan
