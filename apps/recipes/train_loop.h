// The loop every recipe shares. Each step: the next batch, split into
// micro-batches (--micro-batch) whose losses are weighted by their share of
// the batch and whose gradients add up; forward and loss under autocast;
// backward (scaled for fp16, which may skip the step); the warmup + cosine
// schedule; optional gradient clipping; the optimizer step; the divergence
// check; the progress bar; a line in metrics.jsonl; and checkpoints (every
// --checkpoint-every steps, when the recipe asks, at --stop-after, and at
// the end). Under mpirun, each rank trains on its shard of every batch and
// the gradients are averaged across ranks (kiln/distributed) before the update;
// with --pipeline-stages, each rank runs its stage of the model on the 1F1B
// schedule (kiln/distributed/pipeline.h) and the stages' replicas average.
#pragma once
#include "apps/recipes/common.h"
#include "apps/recipes/run_record.h"
#include "kiln/distributed/pipeline.h"

namespace kiln::recipes {

struct LoopSettings {
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.1;  // the schedule decays to max_lr * this
  double clip_norm = 0;       // 0: no clipping
  std::string unit;           // "img", "tok": the progress bar's items
  int64_t items_per_example = 1;  // images: 1; token windows: T
};

// One training batch: inputs and targets, both with the batch as dim 0.
struct Batch {
  Tensor x, y;
};

// --pipeline-stages: this rank's stage of a model split across ranks.
struct PipelineStage {
  distributed::Pipeline* pipeline = nullptr;  // null: the model is not split
  // As distributed::StageWork's: the micro-batch's inputs (first stage) or the
  // previous stage's output in; the last stage returns the mean loss.
  // Called under autocast.
  std::function<Tensor(const Tensor& in, const Tensor& targets)> forward;
  std::function<Shape(int64_t rows)> activation_shape;
  std::vector<Tensor> params;  // the parameters this stage updates
  std::vector<Tensor> tied;    // those the first and last stage share (their gradients are summed)
};

struct LoopHooks {
  std::function<Batch()> next_batch;
  // The mean loss over (a slice of) a batch, on the run's device; called
  // under autocast.
  std::function<Tensor(const Tensor& x, const Tensor& y)> loss;
  // The weight of a micro-batch's mean loss (x, y: its rows of this rank's
  // shard); the step's gradients are the weighted sum. Unset: its share of
  // the shard's rows. The ranks' results are averaged, so weights that add
  // up to the world size over the whole batch make the step's loss the
  // batch's (kiln train sft: each part's share of the batch's learned tokens).
  std::function<double(const Tensor& x, const Tensor& y)> weight;
  // Called after each step with the steps done; returns true to checkpoint
  // there (image recipes: an epoch ended, after logging validation). Lines
  // go to `log`, which first ends the progress bar's line.
  std::function<bool(int64_t steps_done, double loss, const Log& log)> after_step;
  // Asked after after_step: true when the run met its goal early
  // (--target-accuracy); the loop then checkpoints and ends as at the last step.
  std::function<bool()> goal_reached;
  // The recipe's additions to state.json.
  std::function<void(nlohmann::json& state)> add_state;
  PipelineStage stage;  // recipes whose model can be split fill it under --pipeline-stages
};

// Trains from run.step() to run.config.total_steps (or --stop-after) and
// fills the loop's part of `result`. Returns true if the run reached its end
// (or its goal).
bool run_training_loop(const TrainOptions& o, const RunStart& run, RunParts& parts, const LoopSettings& settings,
                       const LoopHooks& hooks, RunRecord& record, TrainResult& result, const Log& log);

// Forward and backward over `batch` in micro-batches of at most `micro`
// examples; gradients add up in the parameters' .grad (zero them first).
// With `poison`, the first micro-batch's loss is multiplied by NaN (tests).
// `before_last` runs before the last micro-batch's backward (data
// parallelism reduces during that one). Returns the batch's mean loss.
double accumulate_gradients(const Batch& batch, int64_t micro, const LoopHooks& hooks, MixedPrecision& precision,
                            bool poison = false, const std::function<void()>& before_last = {});

// Data parallelism: this rank's rows of a global batch. Every rank reads the
// same global batch and keeps rows [B*r/W, B*(r+1)/W), so the batches, and
// with them the loss curve, do not depend on the number of ranks.
Batch shard_for_rank(const Batch& global, int rank, int world_size);

// The devices whose memory a run reports: its device, and the host.
std::vector<Device> record_devices(const RunStart& run);

}  // namespace kiln::recipes
