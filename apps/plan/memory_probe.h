// The planner's memory figures: one real training step of the recipe's model
// (its StepParts: forward, backward, optimizer step) under a strategy, run
// on a device whose allocator is then read. On the meta device nothing is
// computed and nothing is held, so any model size is cheap to probe; on the
// CPU the same step really runs, which is how the tests check the meta
// figures against measured ones.
#pragma once
#include "apps/plan/plan.h"
#include "kiln/core/device.h"

namespace kiln::plan {

StepMemory probe_step(const PlanInput& input, const Strategy& strategy, Device device);
// probe_step on `device`, as make_plan's MemoryProbe.
MemoryProbe device_probe(Device device);

// The recipe whose StepParts a plan input runs (GPT presets are fortunes-gpt's model).
std::string plan_recipe_name(const PlanInput& input);

}  // namespace kiln::plan
