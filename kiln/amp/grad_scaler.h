// Dynamic loss scaling for f16 training (flashlight's DynamicScaler,
// PyTorch's GradScaler). f16 has 5 exponent bits: gradients below ~6e-8
// flush to zero. Multiplying the loss by a large scale lifts the whole
// backward pass into f16's range; the gradients are divided by the same
// scale before the optimizer sees them.
//
// The scale adapts. A step whose gradients hold an inf or NaN (the scale was
// too large and something overflowed) is skipped and the scale halves; after
// growth_interval clean steps in a row it doubles. One training step:
//
//   Tensor loss = ...;                       // under AutocastGuard(f16)
//   opt.zero_grad();
//   scaler.scale_loss(loss).backward();
//   bool ok = scaler.unscale_and_check(optimizer.gradients());
//   if (ok) opt.step();                      // skipped on inf/NaN
//   scaler.update(!ok);
//
// Master weights: the parameters themselves stay f32 (autocast casts them
// per op, kiln/amp/autocast.h), so they are the master copy and the
// optimizer updates them in f32; there is no separate f16 weight copy.
#pragma once
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/core/tensor.h"

namespace kiln::amp {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps in a row before growing
  // The scale never backs off below this (the smallest f16 subnormal): a
  // scale of 0 would silence every gradient instead of reporting overflow.
  double min_scale = 1.0 / 16777216.0;  // 2^-24
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(LossScalerOptions options = {});

  // loss * scale (differentiable); call backward on the result.
  Tensor scale_loss(const Tensor& loss) const;
  // Divides every gradient by the scale, in place, and
  // returns false if any of them holds an inf or NaN. The check runs on the
  // gradients' device; only one scalar per device comes back to the host.
  bool unscale_and_check(const std::vector<Tensor>& grads) const;
  // Backs the scale off after an inf/NaN step; grows it after
  // growth_interval clean steps in a row.
  void update(bool found_inf);

  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }  // clean steps since the last change
  const LossScalerOptions& options() const { return options_; }

  // What a checkpoint needs to resume bitwise: the scale and the tracker.
  // (The options come from the code, as the optimizer's hyperparameters do.)
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
};

}  // namespace kiln::amp
