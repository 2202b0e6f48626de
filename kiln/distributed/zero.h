// ZeRO stage 1 (`--zero 1`): AdamW whose moments are sharded across the
// ranks, as in DeepSpeed and llm.c. The parameters are viewed as one flat
// vector, padded to a multiple of the world size; rank r owns the r-th
// contiguous slice, keeps the two moments for that slice only (1/W of
// AdamW's state), updates those elements in place, and an all-gather then
// gives every rank the whole updated vector.
//
// The gradients arrive already averaged by the GradientAverager (an
// all-reduce per bucket, overlapped with backward) rather than
// reduce-scattered: clipping and the fp16 overflow check then see the whole
// gradient, at 1.5x the traffic of reduce-scatter + all-gather.
//
// The update equals AdamW's element for element (the same kernel on the
// same numbers). state() gathers the full moments, so a checkpoint is the
// same file as a plain run's, and resumes at any world size.
#pragma once
#include "kiln/distributed/communicator.h"
#include "kiln/optim/optimizer.h"

namespace kiln::distributed {

class ShardedAdamW : public optim::Optimizer {
 public:
  ShardedAdamW(optim::NamedTensors params, double lr, optim::AdamWOptions opts, Communicator& comm);
  void step() override;
  // Collective: every rank must call it, in the same order (checkpoints).
  optim::NamedTensors state() const override;
  void load_state(const optim::NamedTensors& state, int64_t step) override;

  int64_t shard_begin() const { return begin_; }
  int64_t shard_end() const { return end_; }

 private:
  // The part of parameter i inside [begin_, end_), as [first, last) in its flat view; empty if none.
  std::pair<int64_t, int64_t> owned_part(size_t i) const;

  optim::AdamWOptions opts_;
  Communicator& comm_;
  std::vector<int64_t> offsets_;  // each parameter's first element in the flat vector
  int64_t total_ = 0, shard_ = 0, begin_ = 0, end_ = 0;
  Tensor m_, v_;  // [shard_]: this rank's moments
};

}  // namespace kiln::distributed
