// Pieces every recipe shares: moving named tensors to the host for
// checkpoints, saving a run, and restoring one.
#pragma once
#include <filesystem>

#include "apps/recipes/precision.h"
#include "apps/recipes/recipe.h"
#include "apps/recipes/run_config.h"
#include "kiln/data/loader_state.h"
#include "kiln/distributed/pipeline.h"
#include "kiln/io/checkpoint.h"
#include "kiln/nn/module.h"
#include "kiln/optim/optimizer.h"

namespace kiln::recipes {

// Host copies, for writing to disk.
NamedTensors to_host(const nn::NamedTensors& tensors);
std::vector<std::pair<std::string, Tensor>> to_pairs(const std::map<std::string, Tensor>& m);

// Checkpoint directory given either a checkpoint or a run directory.
std::string resolve_checkpoint(const std::string& path);

// --pipeline-stages: the split of a model's parameters over the stages.
struct StagePlacement {
  distributed::Pipeline* pipeline = nullptr;
  std::vector<std::vector<std::string>> stage_params;  // the names each stage uses
};

// Moves `model` to the run's device and builds its AdamW: with --offload, an
// OffloadAdamW whose state lives on the host, and with bf16/fp16 the device
// keeps 2-byte parameters (the fp32 master is on the host); on a pipeline
// stage, a StageOptimizer over the stage's parameters, which alone go to the
// device (the rest of the model stays in host memory).
// `host` holds offloaded state (the meta device's host is meta:1 when planning).
std::unique_ptr<optim::Optimizer> place_model_and_optimizer(const RunConfig& config, Device device,
                                                             nn::Module& model, const optim::AdamWOptions& options,
                                                             Device host = Device::cpu(),
                                                             const StagePlacement* stage = nullptr);

// Saves model + optimizer + state and prunes to the last 3 checkpoints. The
// model's weights are the optimizer's fp32 master copy where it keeps one.
std::string save_run(const std::string& out_dir, int64_t step, const nn::Module& model,
                     const optim::Optimizer& opt, const nlohmann::json& state);

// What every recipe saves in state.json and restores on --resume: model,
// optimizer (with its own step, since skipped fp16 steps do not advance it),
// loss scaler, data-loader position and dropout RNG.
struct RunParts {
  nn::Module& model;
  optim::Optimizer& opt;
  MixedPrecision& precision;
  Generator& dropout_gen;
  std::function<data::LoaderState()> loader_state;
  std::function<void(const data::LoaderState&)> set_loader_state;
};

// Restores `parts` from the checkpoint `run` was resumed from (if any).
void restore_run(const RunStart& run, RunParts& parts, const Log& log);
// The recipe-independent part of state.json at `step`.
nlohmann::json run_state(const RunStart& run, const RunParts& parts, int64_t step, double loss);

}  // namespace kiln::recipes
