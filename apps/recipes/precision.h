// `kiln train --precision fp32|bf16|fp16`: what a recipe's training step
// does differently per precision (design: docs/MIXED_PRECISION.md).
//  * fp32: nothing.
//  * bf16: forward and loss run under AutocastGuard(bf16); bf16 has f32's
//    exponent range, so no loss scaling is needed.
//  * fp16: autocast f16 plus dynamic loss scaling; a step whose gradients
//    overflow is skipped (no optimizer update) and logged.
// Evaluation always runs in fp32.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/recipes/recipe.h"
#include "kiln/amp/autocast.h"
#include "kiln/amp/grad_scaler.h"

namespace kiln::recipes {

std::vector<std::string> precision_names();  // fp32, bf16, fp16

// Whether --precision bf16 runs as fp32 on `device`: a CPU without bf16
// instructions (what bf16_falls_back_to_fp32 says, and what kiln plan plans).
bool bf16_runs_in_fp32(Device device);

// --precision bf16 on `device`: true, after saying so through `log`, where
// it must run as fp32 instead (a CPU without bf16 instructions, where bf16
// is slower than fp32: every product converts to f32 and back). `doing` names
// the job in the message ("training", "serving").
bool bf16_falls_back_to_fp32(Device device, const Log& log, const char* doing);

class MixedPrecision {
 public:
  // Throws on an unknown name. initial_loss_scale (fp16): 0 means 2^16.
  explicit MixedPrecision(const std::string& precision, double initial_loss_scale = 0);

  // The dtype for AutocastGuard around forward + loss (f32 turns it off).
  DType autocast_dtype() const { return autocast_; }
  // Runs backward on `loss` (scaled for fp16), then unscales the gradients
  // and checks them. Returns false when the optimizer step must be skipped
  // (fp16 gradients with inf/NaN), after logging it. `step` is 1-based.
  bool backward(const Tensor& loss, const std::vector<Tensor>& params, int64_t step, const Log& log);
  // The same in two halves, for gradient accumulation: backward of each
  // micro-batch's share of the loss (scaled for fp16; gradients add up),
  // then one unscale-and-check of the step's gradients (Optimizer::gradients()).
  // `agree` (pipeline stages, each holding part of the gradients) turns this
  // rank's verdict into the job's, so every stage skips the same steps and
  // keeps the same loss scale.
  void accumulate(const Tensor& loss);
  bool finish_step(const std::vector<Tensor>& grads, int64_t step, const Log& log,
                   const std::function<bool(bool finite)>& agree = {});
  int64_t skipped_steps() const { return skipped_; }

  // Checkpoint state: "precision", plus "loss_scaler" for fp16.
  void save(nlohmann::json& state) const;
  // Restores the loss scaler from a checkpoint's state (a checkpoint from
  // another precision is allowed: the run continues in this one, logged).
  void load(const nlohmann::json& state, const Log& log);

 private:
  std::string name_;
  DType autocast_ = DType::f32;
  std::optional<amp::DynamicLossScaler> scaler_;
  int64_t skipped_ = 0;
};

}  // namespace kiln::recipes
