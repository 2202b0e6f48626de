// Pipeline parallelism (`--pipeline-stages S`): the model's layers split
// into S contiguous stages on S ranks. A step's batch runs as M
// micro-batches on the 1F1B schedule (PipeDream-Flush, as Megatron-LM and
// DeepSpeed): each stage runs a few forwards to fill the pipe, then
// alternates one forward and one backward, then drains. Activations go to
// the next stage and their gradients come back, point to point; a stage
// holds at most S - its index micro-batches' activations at once.
//
// Data x pipeline: world = R replicas x S stages, rank = replica * S + stage,
// so a replica's stages are neighbouring ranks (one node, fast links) and the
// replicas of one stage average their gradients over their own group.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "kiln/distributed/communicator.h"

namespace kiln::distributed {

struct PipelineLayout {
  int stages = 1, replicas = 1;
  int stage = 0, replica = 0;  // this rank's
  int rank_of(int replica_index, int stage_index) const { return replica_index * stages + stage_index; }
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};
// Throws when `stages` does not divide the world size.
PipelineLayout pipeline_layout(int rank, int world_size, int stages);

// Splits layers with the given costs into `stages` contiguous runs so that
// the most expensive stage costs as little as possible. Returns S + 1
// boundaries: stage s has layers [b[s], b[s+1]). Every stage gets a layer.
std::vector<int64_t> balance_stages(const std::vector<double>& layer_costs, int stages);

// The share of a step that stages spend idle on 1F1B: (S-1)/(M+S-1).
double bubble_fraction(int stages, int64_t micro_batches);

// What one rank runs of the model.
struct StageWork {
  // The first stage gets the micro-batch's inputs; the others, the previous
  // stage's output (a leaf that requires grad). The last stage returns the
  // micro-batch's mean loss against `targets`; the others, the activation
  // to send on.
  std::function<Tensor(const Tensor& in, const Tensor& targets)> forward;
  // The shape of what a stage sends on for `rows` examples (f32 on the wire).
  std::function<Shape(int64_t rows)> activation_shape;
  // Runs backward from a micro-batch's weighted loss (last stage; mixed
  // precision scales it here).
  std::function<void(const Tensor& loss)> backward_loss;
  // Called before this stage's last backward of the step (data parallelism
  // then reduces each bucket as backward finishes it).
  std::function<void()> before_last_backward;
  Device device = Device::cpu();
};

class Pipeline {
 public:
  // Collective over `world` (splits it into the groups below).
  Pipeline(Communicator& world, int stages);
  const PipelineLayout& layout() const { return layout_; }
  // The replicas of this rank's stage (data-parallel averaging), and the
  // stages of this rank's replica.
  Communicator& replicas() { return *replicas_; }
  Communicator& stages() { return *stages_; }

  // One step's forward and backward over `x`, `y` (this replica's rows) in
  // micro-batches of at most `micro` rows, on the 1F1B schedule. Each
  // micro-batch's loss is weighted by its share of the rows, so the
  // gradients are the batch's mean-loss gradients. Returns the batch's mean
  // loss on the last stage, 0 on the others.
  double train_step(const Tensor& x, const Tensor& y, int64_t micro, const StageWork& work);

  // Adds the gradients of weights the first and last stage both hold (a
  // tied embedding) across the two, so both update them alike.
  void sum_tied_gradients(const std::vector<Tensor>& grads);

 private:
  Communicator& world_;
  PipelineLayout layout_;
  std::unique_ptr<Communicator> replicas_, stages_;
};

}  // namespace kiln::distributed
