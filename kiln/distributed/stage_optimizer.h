// The optimizer of one pipeline stage. Every rank builds the whole model,
// but updates only its stage's parameters, through an inner optimizer over
// them (AdamW, or ShardedAdamW over the stage's replicas with --zero 1):
// gradients and optimizer state exist only where a stage runs.
//
// state() is collective over the job: replica 0's later stages send rank 0
// their weights and state, which rank 0 copies into its own model, so the
// checkpoint it writes is the file one process would write, and resumes at
// any layout. Every state entry is "<parameter><suffix>" with the
// parameter's shape (AdamW's moments).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kiln/distributed/pipeline.h"
#include "kiln/optim/optimizer.h"

namespace kiln::distributed {

class StageOptimizer : public optim::Optimizer {
 public:
  // `model`: every parameter, in model order. `stage_params[s]`: the names
  // stage s uses (the tied embedding appears in the first and the last).
  // `inner` updates this rank's stage_params[stage].
  StageOptimizer(optim::NamedTensors model, const std::vector<std::vector<std::string>>& stage_params,
                 std::unique_ptr<optim::Optimizer> inner, Pipeline& pipeline, Communicator& world);
  void step() override;
  void zero_grad() override;
  std::vector<Tensor> gradients() override;
  optim::NamedTensors state() const override;
  void load_state(const optim::NamedTensors& state, int64_t step) override;

 private:
  std::unique_ptr<optim::Optimizer> inner_;
  Pipeline& pipeline_;
  Communicator& world_;
  std::vector<int> owner_;  // the first stage that uses each parameter
  std::vector<std::string> own_names_;
};

}  // namespace kiln::distributed
