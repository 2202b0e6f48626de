#include "apps/recipes/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "apps/recipes/progress.h"
#include "kiln/backend/profiler.h"
#include "kiln/distributed/gradient_averager.h"
#include "kiln/distributed/world.h"

namespace kiln::recipes {

std::vector<Device> record_devices(const RunStart& run) {
  if (run.device.is_cpu()) return {Device::cpu()};
  return {run.device, Device::cpu()};
}

// Forward and backward over `batch` in micro-batches of at most `micro`
// examples. Each micro-batch's mean loss is weighted by its share of the
// batch (hooks.weight), so the gradients add up to the full batch's mean-loss gradient.
// Returns the batch's mean loss.
double accumulate_gradients(const Batch& batch, int64_t micro, const LoopHooks& hooks, MixedPrecision& precision,
                            bool poison, const std::function<void()>& before_last) {
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
    const double weight = hooks.weight ? (n == B ? hooks.weight(batch.x, batch.y)
                                                 : hooks.weight(batch.x.slice(0, first, first + n),
                                                                batch.y.slice(0, first, first + n)))
                                       : double(n) / double(B);
    if (weight != 1.0) loss = mul_scalar(loss, weight);
    if (poison && first == 0) loss = mul_scalar(loss, std::numeric_limits<double>::quiet_NaN());
    if (before_last && first + n >= B) before_last();
    precision.accumulate(loss);
    if (loss.device().type != DeviceType::meta) loss_value += loss.item();  // meta (planning): no values
  }
  return loss_value;
}

Batch shard_for_rank(const Batch& global, int rank, int world_size) {
  const int64_t B = global.x.size(0);
  KILN_CHECK(B % world_size == 0, "a batch of ", B, " does not split evenly over ", world_size, " ranks; use a "
             "--batch-size that is a multiple of the number of ranks");
  const int64_t rows = B / world_size;
  return {global.x.slice(0, rows * rank, rows * (rank + 1)), global.y.slice(0, rows * rank, rows * (rank + 1))};
}

namespace {

std::vector<Tensor> trainable(const nn::Module& model) {
  std::vector<Tensor> out;
  for (const auto& [name, p] : model.trainable_parameters()) out.push_back(p);
  return out;
}

// One step's gradients, in one process, data parallel, or on a pipeline
// stage (possibly also data parallel). Returns the batch's mean loss.
double compute_gradients(const Batch& batch, int64_t micro, const LoopHooks& hooks, MixedPrecision& precision,
                         distributed::GradientAverager* averager, distributed::Communicator& replicas, Device device, bool poison) {
  const Batch shard = replicas.world_size() > 1 ? shard_for_rank(batch, replicas.rank(), replicas.world_size()) : batch;
  const std::function<void()> arm = averager ? std::function<void()>([averager] { averager->arm(); }) : nullptr;
  const PipelineStage& stage = hooks.stage;
  double loss = 0;
  if (stage.pipeline) {
    distributed::StageWork work;
    work.forward = [&](const Tensor& in, const Tensor& targets) {
      amp::AutocastGuard autocast(precision.autocast_dtype());
      return stage.forward(in, targets);
    };
    work.activation_shape = stage.activation_shape;
    work.backward_loss = [&](const Tensor& l) { precision.accumulate(l); };
    work.before_last_backward = arm;
    work.device = device;
    loss = stage.pipeline->train_step(shard.x, shard.y, micro, work);
  } else {
    loss = accumulate_gradients(shard, micro, hooks, precision, poison, arm);
  }
  if (averager) averager->finish();
  if (stage.pipeline) stage.pipeline->sum_tied_gradients(optim::gradients_of(stage.tied));
  if (distributed::world_size() == 1) return loss;
  // Every replica's last stage holds its shard's mean loss (the other stages 0): equal shards, so their mean is the batch's.
  Tensor total = Tensor::from_vector<double>({loss}, {1});
  distributed::world().all_reduce(total, distributed::Reduce::sum);
  return total.item() / double(replicas.world_size());
}

// Gradient clipping by the global norm; a pipeline's is over every stage's
// gradients, the tied embedding's counted once.
void clip_global_norm(const std::vector<Tensor>& grads, double max_norm, const PipelineStage& stage) {
  if (!stage.pipeline) {
    optim::clip_gradients(grads, max_norm);
    return;
  }
  const distributed::PipelineLayout& l = stage.pipeline->layout();
  std::vector<Tensor> counted;
  for (const Tensor& p : stage.params) {
    const bool tied = std::any_of(stage.tied.begin(), stage.tied.end(),
                                  [&](const Tensor& t) { return t.impl_ptr() == p.impl_ptr(); });
    if (!(tied && l.last() && l.stages > 1) && p.grad().defined()) counted.push_back(p.grad());
  }
  Tensor squares = Tensor::from_vector<double>({optim::sum_of_squares(counted)}, {1});
  stage.pipeline->stages().all_reduce(squares, distributed::Reduce::sum);
  optim::clip_to_norm(grads, std::sqrt(squares.item()), max_norm);
}

}  // namespace

bool run_training_loop(const TrainOptions& o, const RunStart& run, RunParts& parts, const LoopSettings& settings,
                       const LoopHooks& hooks, RunRecord& record, TrainResult& result, const Log& log) {
  const RunConfig& c = run.config;
  const int64_t start = run.step(), total = c.total_steps;
  int64_t micro = c.micro_batch > 0 ? std::min(c.micro_batch, c.batch_size) : c.batch_size;
  result.start_step = start;
  result.resumed_from = run.checkpoint_dir;
  auto save = [&](int64_t step, double loss) {
    nlohmann::json state = run_state(run, parts, step, loss);
    if (hooks.add_state) hooks.add_state(state);
    if (distributed::is_rank0())
      result.checkpoint = save_run(run.out_dir, step, parts.model, parts.opt, state);
    else
      parts.opt.state();  // collective under --zero 1: rank 0 gathers the whole state through it
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

  // Under mpirun: average the gradients across the data-parallel ranks
  // (kiln/distributed); with --pipeline-stages, across the replicas of this stage.
  const PipelineStage& stage = hooks.stage;
  KILN_CHECK(o.pipeline_stages <= 1 || stage.pipeline, "--pipeline-stages: this recipe's model cannot be split into "
             "stages yet (fortunes-gpt's can); drop --pipeline-stages");
  distributed::Communicator& replicas = stage.pipeline ? stage.pipeline->replicas() : distributed::world();
  std::unique_ptr<distributed::GradientAverager> averager;
  // --offload streams the gradients to host buffers during backward itself;
  // there they are averaged once backward is done.
  const bool average_on_host = replicas.world_size() > 1 && c.offload;
  if (replicas.world_size() > 1) {
    if (!average_on_host)
      averager = std::make_unique<distributed::GradientAverager>(replicas, stage.pipeline ? stage.params
                                                                                   : trainable(parts.model));
    log("data parallel: " + std::to_string(replicas.world_size()) + " ranks over " + distributed::world().transport() +
        ", " + std::to_string(c.batch_size / replicas.world_size()) + " examples each per step, gradients averaged " +
        (averager ? "in " + std::to_string(averager->bucket_count()) + " buckets during backward"
                  : std::string("on the host after backward (--offload)")));
  }
  if (stage.pipeline) {
    const int S = stage.pipeline->layout().stages;
    const int64_t rows = c.batch_size / replicas.world_size();
    // GPipe's advice: M >= 4 S micro-batches keep the bubble small.
    if (c.micro_batch == 0) micro = std::max<int64_t>(1, (rows + 4 * S - 1) / (4 * S));
    const int64_t M = (rows + micro - 1) / micro;
    char line[200];
    std::snprintf(line, sizeof line, "pipeline parallel: %d stages, 1F1B over %lld micro-batches of %lld; bubble "
                  "(S-1)/(M+S-1) = %.1f%% of each step", S, (long long)M, (long long)micro,
                  100.0 * distributed::bubble_fraction(S, M));
    log(line);
  }
  // fp16 on a pipeline: a step is skipped everywhere if any stage's gradients overflowed.
  const std::function<bool(bool)> agree = [&](bool finite) {
    Tensor overflowed = Tensor::from_vector<double>({finite ? 0.0 : 1.0}, {1});
    stage.pipeline->stages().all_reduce(overflowed, distributed::Reduce::sum);
    return overflowed.item() == 0;
  };
  for (const Device& d : record_devices(run)) allocator_for(d).reset_peak();
  if (o.profile) {
    Profiler::reset();
    Profiler::enable(true, o.profile_shapes);
  }
  // Dropout acts during the steps whatever mode loading or an evaluation
  // left the model in (a Hugging Face model loads for inference).
  parts.model.train();
  ProgressBar bar(total, start, settings.unit, o.progress);
  const Log line_log = [&](const std::string& line) {
    bar.finish();
    log(line);
  };
  double loss_value = 0;
  bool goal_reached = false;
  int64_t step = start;
  for (; step < total; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    Batch batch = hooks.next_batch();
    parts.opt.zero_grad();
    loss_value = compute_gradients(batch, micro, hooks, parts.precision, averager.get(), replicas, run.device,
                                   o.poison_step == step + 1);
    const std::vector<Tensor> grads = parts.opt.gradients();
    if (average_on_host)
      for (Tensor g : grads) replicas.all_reduce(g, distributed::Reduce::avg);
    const bool finite = parts.precision.finish_step(grads, step + 1, log, stage.pipeline ? agree : nullptr);  // fp16 may skip
    // fp16 skips a non-finite step and backs the scale off; anywhere else a
    // non-finite loss stops the run before the optimizer spreads it into the
    // weights, so the last checkpoint stays good.
    KILN_CHECK(std::isfinite(loss_value) || !finite, "training diverged at step ", step + 1, " (loss ", loss_value,
               "); the last good checkpoint is in ", run.out_dir, ". Lower the learning rate (--lr) and train into a "
               "new --out directory");
    parts.opt.lr = optim::warmup_cosine_lr(step, settings.warmup_steps, total, c.lr, c.lr * settings.min_lr_ratio);
    if (finite) {
      if (settings.clip_norm > 0) clip_global_norm(grads, settings.clip_norm, stage);
      parts.opt.step();
    }
    const int64_t items = batch.x.size(0) * settings.items_per_example;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    bar.update(step, loss_value, items);
    record.train_step(step + 1, loss_value, parts.opt.lr, seconds > 0 ? double(items) / seconds : 0.0,
                      bar.elapsed_seconds(), seconds);
    const bool recipe_asks = hooks.after_step && hooks.after_step(step + 1, loss_value, line_log);
    goal_reached = hooks.goal_reached && hooks.goal_reached();
    const bool interrupted = o.interrupted && o.interrupted();
    const bool stop_now = goal_reached || interrupted || (o.stop_after > 0 && step + 1 - start >= o.stop_after);
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
  return step >= total || goal_reached;
}

}  // namespace kiln::recipes
