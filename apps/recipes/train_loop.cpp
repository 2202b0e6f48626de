#include "apps/recipes/train_loop.h"

#include <cmath>
#include <limits>

#include "apps/recipes/progress.h"

namespace kiln::recipes {

bool run_training_loop(const TrainOptions& o, const RunStart& run, RunParts& parts, const LoopSettings& settings,
                       const LoopHooks& hooks, TrainResult& result, const Log& log) {
  const RunConfig& c = run.config;
  const int64_t start = run.step(), total = c.total_steps;
  result.start_step = start;
  result.resumed_from = run.checkpoint_dir;
  auto save = [&](int64_t step, double loss) {
    nlohmann::json state = run_state(run, parts, step, loss);
    if (hooks.add_state) hooks.add_state(state);
    result.checkpoint = save_run(run.out_dir, step, parts.model, parts.opt, state);
  };
  if (start >= total) {
    log("the run in " + run.out_dir + " already finished at step " + std::to_string(start) +
        "; to train longer, resume with --steps N (N > " + std::to_string(start) + ")");
    result.steps_done = start;
    result.final_train_loss = run.checkpoint ? run.checkpoint->state.value("train_loss", 0.0) : 0.0;
    result.checkpoint = run.checkpoint_dir;
    return true;
  }

  ProgressBar bar(total, start, settings.unit, o.progress);
  const Log line_log = [&](const std::string& line) {
    bar.finish();
    log(line);
  };
  double loss_value = 0;
  int64_t step = start;
  for (; step < total; ++step) {
    int64_t items = 0;
    Tensor loss;
    {
      amp::AutocastGuard autocast(parts.precision.autocast_dtype());  // fp32: off
      loss = hooks.next_loss(items);
    }
    if (o.poison_step == step + 1) loss = mul_scalar(loss, std::numeric_limits<double>::quiet_NaN());
    parts.opt.zero_grad();
    const bool finite = parts.precision.backward(loss, parts.model.parameters(), step + 1, log);  // fp16 may skip
    loss_value = loss.item();
    // fp16 skips a non-finite step and backs the scale off; anywhere else a
    // non-finite loss stops the run before the optimizer spreads it into the
    // weights, so the last checkpoint stays good.
    KILN_CHECK(std::isfinite(loss_value) || !finite, "training diverged at step ", step + 1, " (loss ", loss_value,
               "); the last good checkpoint is in ", run.out_dir, ". Lower the learning rate (--lr) and train into a "
               "new --out directory");
    parts.opt.lr = optim::warmup_cosine_lr(step, settings.warmup_steps, total, c.lr, c.lr * settings.min_lr_ratio);
    if (finite) {
      if (settings.clip_norm > 0) optim::clip_grad_norm(parts.model.parameters(), settings.clip_norm);
      parts.opt.step();
    }
    bar.update(step, loss_value, items);
    const bool recipe_asks = hooks.after_step && hooks.after_step(step + 1, loss_value, line_log);
    const bool stop_now = o.stop_after > 0 && step + 1 - start >= o.stop_after;
    const bool periodic = o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0;
    if (recipe_asks || periodic || stop_now || step + 1 == total) save(step + 1, loss_value);
    if (stop_now) {
      ++step;
      break;
    }
  }
  bar.finish();
  result.steps_done = step;
  result.skipped_steps = parts.precision.skipped_steps();
  result.final_train_loss = loss_value;
  result.items_per_second = bar.items_per_second();
  result.seconds = bar.elapsed_seconds();
  return step >= total;
}

}  // namespace kiln::recipes
