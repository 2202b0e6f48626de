// `kiln train ... --fit`: before training, plan the run against its device
// (its --memory-budget, or the GPU's memory), keep the run's precision (so
// its numbers do not change), and apply the fastest combination of
// micro-batch, activation checkpointing and offload that fits, saying in one
// line what it chose. Fails with the plan when nothing fits.
#pragma once
#include "apps/recipes/recipe.h"

namespace kiln::plan {

void apply_fit(recipes::TrainOptions& options, const recipes::Log& log);

}  // namespace kiln::plan
