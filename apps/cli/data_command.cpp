#include "apps/cli/data_command.h"

#include <cstdio>
#include <memory>

#include "apps/recipes/jsonl_datasets.h"

namespace kiln::cli {

std::function<int()> add_data_command(CLI::App& app) {
  struct Options {
    std::string name, out, data_dir;
  };
  auto o = std::make_shared<Options>();
  std::string names, help;
  for (const auto& d : recipes::jsonl_datasets()) {
    names += (names.empty() ? "" : ", ") + d.name;
    help += "  " + d.name + ": " + d.summary + "\n";
  }
  auto* cmd = app.add_subcommand("data", "write a fine-tuning data set (JSON Lines) made from Debian's data");
  cmd->footer("data sets:\n" + help);
  cmd->add_option("name", o->name, "which data set: " + names)->required();
  cmd->add_option("--out", o->out, "the folder to write train.jsonl and val.jsonl into")->required();
  cmd->add_option("--data-dir", o->data_dir, "the fortunes directory (default: Debian's)");
  return [cmd, o]() -> int {
    if (!*cmd) return -1;
    std::printf("%s\n", recipes::find_jsonl_dataset(o->name).write(o->out, o->data_dir).c_str());
    return 0;
  };
}

}  // namespace kiln::cli
