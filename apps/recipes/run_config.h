// The settings that define a training run, resolved once per invocation:
// on a fresh run from the options and the recipe's defaults, on --resume
// from the newest checkpoint, which saves them in its state.json.
//
// A resumed run keeps its settings. An option given again with the saved
// value is fine. A different value is
//  - applied with a one-line notice where that is safe: --steps/--epochs
//    (extend or shorten a run, not to before the checkpoint), --micro-batch
//    --offload and --zero (the same update up to float rounding, so no longer
//    bitwise the uninterrupted run), --checkpoint-activations (bitwise the
//    same gradients), --threads, --device, --no-progress,
//    --checkpoint-every, --stop-after;
//  - refused, naming the option and its saved value, otherwise: the recipe,
//    --seed, --batch-size, --lr, --precision, --loss-scale (and the model's
//    config, which the recipe restores from the checkpoint).
#pragma once
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/recipes/recipe.h"
#include "kiln/io/checkpoint.h"

namespace kiln::recipes {

struct RunConfig {
  std::string recipe;
  uint64_t seed = 1337;
  int64_t batch_size = 0;
  int64_t micro_batch = 0;  // 0: the whole batch at once
  bool offload = false;     // AdamW state and fp32 master weights in host memory (kiln/optim/offload.h)
  int zero = 0;             // 1: AdamW's state sharded across data-parallel ranks (kiln/distributed/zero.h)
  std::string checkpointing = "none";  // activation checkpointing (models/gpt/gpt.h)
  double lr = 0;
  int64_t total_steps = 0;
  std::string precision = "fp32";
  double loss_scale = 0;  // fp16's initial scale; 0: the scaler's default

  // Written at the top level of state.json (beside step, loader, ...).
  void save(nlohmann::json& state) const;
  static RunConfig load(const nlohmann::json& state);
};

// A recipe's defaults for a fresh run.
struct RecipeDefaults {
  int64_t batch_size = 0;
  double lr = 0;
  int64_t steps = 0;    // used when the recipe has no epochs
  double epochs = 0;    // image recipes: total steps = epochs * steps_per_epoch(batch)
  std::function<int64_t(int64_t batch_size)> steps_per_epoch;  // empty: --epochs is refused
};

// Where an invocation starts.
struct RunStart {
  RunConfig config;
  Device device;
  std::string out_dir;
  std::optional<Checkpoint> checkpoint;  // loaded by --resume
  std::string checkpoint_dir;            // its directory
  int64_t step() const { return checkpoint ? checkpoint->step : 0; }
};

// Resolves the run for recipe `recipe_name` (see the rules above), sets the
// thread count and checks the device, logging what it uses.
RunStart start_run(const TrainOptions& options, const std::string& recipe_name, const RecipeDefaults& defaults,
                   const Log& log);

// out_dir or runs/<recipe>
std::string resolve_out_dir(const TrainOptions& o, const std::string& recipe_name);

// With --resume, the state.json of the newest checkpoint in out_dir (what a
// recipe reads before start_run to rebuild its data and model); else none.
std::optional<nlohmann::json> saved_run_state(const TrainOptions& o, const std::string& out_dir);

}  // namespace kiln::recipes
