#include "apps/recipes/train_loop.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "apps/recipes/progress.h"
#include "kiln/backend/profiler.h"

namespace kiln::recipes {

std::vector<Device> record_devices(const RunStart& run) {
  if (run.device.is_cpu()) return {Device::cpu()};
  return {run.device, Device::cpu()};
}

// Forward and backward over `batch` in micro-batches of at most `micro`
// examples. Each micro-batch's mean loss is weighted by its share of the
// batch, so the gradients add up to the full batch's mean-loss gradient.
// Returns the batch's mean loss.
double accumulate_gradients(const Batch& batch, int64_t micro, const LoopHooks& hooks, MixedPrecision& precision,
                            bool poison) {
  const int64_t B = batch.x.size(0);
  // What forward saves and backward's temporaries count as activations
  // (the engine books the leaves' .grad under grads itself).
  MemoryCategoryScope activations(MemoryCategory::activations);
  double loss_value = 0;
  for (int64_t first = 0; first < B; first += micro) {
    const int64_t n = std::min(micro, B - first);
    Tensor loss;
    {
      amp::AutocastGuard autocast(precision.autocast_dtype());  // fp32: off
      loss = n == B ? hooks.loss(batch.x, batch.y)
                    : hooks.loss(batch.x.slice(0, first, first + n), batch.y.slice(0, first, first + n));
    }
    if (n != B) loss = mul_scalar(loss, double(n) / double(B));
    if (poison && first == 0) loss = mul_scalar(loss, std::numeric_limits<double>::quiet_NaN());
    precision.accumulate(loss);
    if (loss.device().type != DeviceType::meta) loss_value += loss.item();  // meta (planning): no values
  }
  return loss_value;
}

bool run_training_loop(const TrainOptions& o, const RunStart& run, RunParts& parts, const LoopSettings& settings,
                       const LoopHooks& hooks, RunRecord& record, TrainResult& result, const Log& log) {
  const RunConfig& c = run.config;
  const int64_t start = run.step(), total = c.total_steps;
  const int64_t micro = c.micro_batch > 0 ? std::min(c.micro_batch, c.batch_size) : c.batch_size;
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
  if (micro < c.batch_size)
    log("gradient accumulation: " + std::to_string((c.batch_size + micro - 1) / micro) + " micro-batches of " +
        std::to_string(micro) + " per step of " + std::to_string(c.batch_size));

  for (const Device& d : record_devices(run)) allocator_for(d).reset_peak();
  if (o.profile) {
    Profiler::reset();
    Profiler::enable();
  }
  ProgressBar bar(total, start, settings.unit, o.progress);
  const Log line_log = [&](const std::string& line) {
    bar.finish();
    log(line);
  };
  double loss_value = 0;
  int64_t step = start;
  for (; step < total; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    Batch batch = hooks.next_batch();
    parts.opt.zero_grad();
    loss_value = accumulate_gradients(batch, micro, hooks, parts.precision, o.poison_step == step + 1);
    const std::vector<Tensor> grads = parts.opt.gradients();
    const bool finite = parts.precision.finish_step(grads, step + 1, log);  // fp16 may skip
    // fp16 skips a non-finite step and backs the scale off; anywhere else a
    // non-finite loss stops the run before the optimizer spreads it into the
    // weights, so the last checkpoint stays good.
    KILN_CHECK(std::isfinite(loss_value) || !finite, "training diverged at step ", step + 1, " (loss ", loss_value,
               "); the last good checkpoint is in ", run.out_dir, ". Lower the learning rate (--lr) and train into a "
               "new --out directory");
    parts.opt.lr = optim::warmup_cosine_lr(step, settings.warmup_steps, total, c.lr, c.lr * settings.min_lr_ratio);
    if (finite) {
      if (settings.clip_norm > 0) optim::clip_gradients(grads, settings.clip_norm);
      parts.opt.step();
    }
    const int64_t items = batch.x.size(0) * settings.items_per_example;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    bar.update(step, loss_value, items);
    record.train_step(step + 1, loss_value, parts.opt.lr, seconds > 0 ? double(items) / seconds : 0.0,
                      bar.elapsed_seconds());
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
  if (o.profile) {
    Profiler::enable(false);
    log("where the time went (kiln train --profile):\n" + Profiler::report(bar.elapsed_seconds()));
  }
  result.steps_done = step;
  result.skipped_steps = parts.precision.skipped_steps();
  result.final_train_loss = loss_value;
  result.items_per_second = bar.items_per_second();
  result.seconds = bar.elapsed_seconds();
  return step >= total;
}

}  // namespace kiln::recipes
