// `kiln plan` with neither --gpu nor --memory-budget answers "which GPU should
// I pick?": the plan on every GPU in the table, the fastest strategy that
// fits each, its step time and, with --tokens, the run's hours and what it
// costs to rent and to own; then the pick by cost and the pick by time.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/plan/plan.h"

namespace kiln::plan {

struct GpuChoice {
  std::vector<Plan> plans;          // one per GPU of the table, in its order
  std::optional<size_t> cheapest;   // lowest rent per token among those that fit
  std::optional<size_t> fastest;    // shortest time per token among those that fit
  nlohmann::json to_json() const;
  std::string to_text() const;
};

// Probes each strategy once (memory does not depend on the GPU) and plans it
// on every GPU of `table`.
GpuChoice choose_gpu(const PlanInput& input, const std::vector<GpuSpec>& table, const MemoryProbe& probe);

}  // namespace kiln::plan
