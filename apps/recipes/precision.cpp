#include "apps/recipes/precision.h"

#include <cstdio>

#include "kiln/autograd/ops.h"
#include "kiln/cpu/runtime_defaults.h"
#include "kiln/optim/optimizer.h"

namespace kiln::recipes {

std::vector<std::string> precision_names() { return {"fp32", "bf16", "fp16"}; }

bool bf16_runs_in_fp32(Device device) { return !device.is_cuda() && !cpu_has_bf16_instructions(); }

bool bf16_falls_back_to_fp32(Device device, const Log& log, const char* doing) {
  if (!bf16_runs_in_fp32(device)) return false;
  log(std::string("--precision bf16: this CPU has no bf16 instructions (AVX512-BF16 or AMX), where bf16 is "
                  "slower than fp32 (0.5-0.9x, docs/PERFORMANCE.md); ") +
      doing + " in fp32");
  return true;
}

MixedPrecision::MixedPrecision(const std::string& precision, double initial_loss_scale) : name_(precision) {
  if (precision == "bf16") {
    autocast_ = DType::bf16;
  } else if (precision == "fp16") {
    autocast_ = DType::f16;
    amp::LossScalerOptions options;
    if (initial_loss_scale > 0) options.init_scale = initial_loss_scale;
    scaler_.emplace(options);
  } else {
    KILN_CHECK(precision == "fp32", "unknown precision '", precision, "' (choose one of fp32, bf16, fp16)");
  }
}

bool MixedPrecision::backward(const Tensor& loss, const std::vector<Tensor>& params, int64_t step, const Log& log) {
  accumulate(loss);
  return finish_step(optim::gradients_of(params), step, log);
}

void MixedPrecision::accumulate(const Tensor& loss) { (scaler_ ? scaler_->scale_loss(loss) : loss).backward(); }

bool MixedPrecision::finish_step(const std::vector<Tensor>& grads, int64_t step, const Log& log,
                                 const std::function<bool(bool finite)>& agree) {
  if (!scaler_) return true;
  bool finite = scaler_->unscale_and_check(grads);
  if (agree) finite = agree(finite);
  scaler_->update(!finite);
  if (!finite) {
    ++skipped_;
    char line[128];
    std::snprintf(line, sizeof line, "step %lld: skipped, inf/NaN gradients; loss scale -> %g", (long long)step,
                  scaler_->scale());
    log(line);
  }
  return finite;
}

void MixedPrecision::save(nlohmann::json& state) const {
  state["precision"] = name_;
  if (scaler_) state["loss_scaler"] = scaler_->state();
}

void MixedPrecision::load(const nlohmann::json& state, const Log& log) {
  const std::string saved = state.value("precision", "fp32");
  if (saved != name_) log("checkpoint was trained in " + saved + "; continuing in " + name_);
  if (scaler_ && state.contains("loss_scaler")) scaler_->load_state(state.at("loss_scaler"));
}

}  // namespace kiln::recipes
