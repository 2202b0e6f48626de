// The loop every recipe shares. Each step: forward and loss under autocast,
// backward (scaled for fp16, which may skip the step), the warmup + cosine
// schedule, optional gradient clipping, the optimizer step, the divergence
// check, the progress bar, and checkpoints (every --checkpoint-every steps,
// when the recipe asks, at --stop-after, and at the end).
#pragma once
#include "apps/recipes/common.h"

namespace kiln::recipes {

struct LoopSettings {
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.1;  // the schedule decays to max_lr * this
  double clip_norm = 0;       // 0: no clipping
  std::string unit;           // "img", "tok": the progress bar's items
};

struct LoopHooks {
  // The mean loss of the next batch (called under autocast); sets `items`
  // to the batch's images or tokens.
  std::function<Tensor(int64_t& items)> next_loss;
  // Called after each step with the steps done; returns true to checkpoint
  // there (image recipes: an epoch ended, after logging validation). Lines
  // go to `log`, which first ends the progress bar's line.
  std::function<bool(int64_t steps_done, double loss, const Log& log)> after_step;
  // The recipe's additions to state.json.
  std::function<void(nlohmann::json& state)> add_state;
};

// Trains from run.step() to run.config.total_steps (or --stop-after) and
// fills the loop's part of `result`. Returns true if the run reached its end.
bool run_training_loop(const TrainOptions& o, const RunStart& run, RunParts& parts, const LoopSettings& settings,
                       const LoopHooks& hooks, TrainResult& result, const Log& log);

}  // namespace kiln::recipes
