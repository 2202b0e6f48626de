// AdamW with its state offloaded to host memory, in the style of
// ZeRO-Offload: the fp32 master weights and both moments live on the host;
// the device keeps only the parameters (in their own dtype, which may be
// bf16/fp16) and their gradients. A step
//   1. copies the gradients to host f32 buffers,
//   2. runs AdamW on the CPU backend (vectorised, on all threads) over the
//      master weights, exactly the kernel a CPU AdamW runs,
//   3. copies the updated master weights back into the device parameters,
//      rounding to their dtype.
// That saves 8 bytes per parameter of device memory in fp32 training (the
// moments) and 12 with 2-byte parameters (moments + master).
//
// Not yet: streaming gradients to the host bucket by bucket while backward
// still runs, and overlapping the copies with compute on CUDA streams; the
// copies run after backward. See docs/MEMORY.md.
#pragma once
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

class OffloadAdamW : public Optimizer {
 public:
  // `host`: the CPU (cpu:0), or meta:1 when the planner runs a step on meta.
  OffloadAdamW(NamedTensors params, double lr, AdamWOptions opts = {}, Device host = Device::cpu());
  void step() override;
  // The same names as AdamW's ("<param>.exp_avg", ".exp_avg_sq"), so a
  // checkpoint moves between the two.
  NamedTensors state() const override;
  void load_state(const NamedTensors& state, int64_t step) override;
  // The fp32 master weights: what a checkpoint saves as the model.
  const NamedTensors* master_weights() const override { return &master_; }
  void load_master_weights(const NamedTensors& weights) override;

 private:
  AdamWOptions opts_;
  Device host_;
  NamedTensors master_;
  std::vector<Tensor> m_, v_, host_grads_;
};

}  // namespace kiln::optim
