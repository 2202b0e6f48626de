// Pieces every recipe shares: resolving options, moving named tensors
// between devices for checkpoints, and restoring a run.
#pragma once
#include <filesystem>

#include "apps/recipes/recipe.h"
#include "kiln/io/checkpoint.h"
#include "kiln/nn/module.h"
#include "kiln/optim/optimizer.h"

namespace kiln::recipes {

// Host copies, for writing to disk.
NamedTensors to_host(const nn::NamedTensors& tensors);
std::vector<std::pair<std::string, Tensor>> to_pairs(const std::map<std::string, Tensor>& m);

// out_dir or runs/<recipe>
std::string resolve_out_dir(const TrainOptions& o);
// Checkpoint directory given either a checkpoint or a run directory.
std::string resolve_checkpoint(const std::string& path);

// Saves model + optimizer + state and prunes to the last 3 checkpoints.
std::string save_run(const std::string& out_dir, int64_t step, const nn::Module& model,
                     const optim::Optimizer& opt, const nlohmann::json& state);

// Sets threads and checks the device, logging what is used.
void setup_runtime(const TrainOptions& o, const Log& log);

}  // namespace kiln::recipes
