#include "kiln/amp/grad_scaler.h"

#include <cmath>
#include <map>

#include "kiln/autograd/ops.h"

namespace kiln::amp {

DynamicLossScaler::DynamicLossScaler(LossScalerOptions o) : options_(o), scale_(o.init_scale) {
  KILN_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale),
             "loss scaler: init_scale must be positive and finite, got ", o.init_scale);
  KILN_CHECK(o.growth_factor > 1.0, "loss scaler: growth_factor must be > 1, got ", o.growth_factor);
  KILN_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "loss scaler: backoff_factor must be in (0, 1), got ",
             o.backoff_factor);
  KILN_CHECK(o.growth_interval > 0, "loss scaler: growth_interval must be > 0, got ", o.growth_interval);
  KILN_CHECK(o.min_scale > 0 && o.min_scale <= o.init_scale, "loss scaler: min_scale must be in (0, init_scale]");
}

Tensor DynamicLossScaler::scale_loss(const Tensor& loss) const { return mul_scalar(loss, scale_); }

bool DynamicLossScaler::unscale_and_check(const std::vector<Tensor>& grads) const {
  NoGradGuard no_grad;
  const double inv_scale = 1.0 / scale_;
  // Per device, the sum over all gradients of g * 0: 0 if every element is
  // finite, NaN if any is inf or NaN (inf * 0 = NaN, and NaN survives a sum).
  // Unlike sum(g), it cannot overflow on large finite gradients.
  std::map<std::string, Tensor> probes;
  for (Tensor g : grads) {
    backend_for(g).unary(UnaryOp::mul_scalar, g, g, inv_scale);  // in place, as clip_grad_norm
    Tensor probe = sum(mul_scalar(g, 0.0));
    auto [it, fresh] = probes.emplace(g.device().str(), probe);
    if (!fresh) it->second = add(it->second, probe);
  }
  bool finite = true;
  for (const auto& [device, probe] : probes)  // a meta (planning) device has no values: count it finite
    finite = finite && (probe.device().type == DeviceType::meta || std::isfinite(probe.item()));
  return finite;
}

void DynamicLossScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ < options_.growth_interval) return;
  growth_tracker_ = 0;
  if (std::isfinite(scale_ * options_.growth_factor)) scale_ *= options_.growth_factor;
}

nlohmann::json DynamicLossScaler::state() const {
  return {{"scale", scale_}, {"growth_tracker", growth_tracker_}};
}

void DynamicLossScaler::load_state(const nlohmann::json& j) {
  KILN_CHECK(j.is_object() && j.contains("scale") && j.contains("growth_tracker"),
             "loss scaler state must hold 'scale' and 'growth_tracker', got ", j.dump());
  double s = j.at("scale").get<double>();
  int64_t t = j.at("growth_tracker").get<int64_t>();
  KILN_CHECK(s > 0 && std::isfinite(s), "loss scaler state: scale must be positive and finite, got ", s);
  KILN_CHECK(t >= 0, "loss scaler state: growth_tracker must be >= 0, got ", t);
  scale_ = s;
  growth_tracker_ = t;
}

}  // namespace kiln::amp
