#include "kiln/optim/optimizer.h"

#include <cmath>
#include <map>

namespace kiln::optim {

namespace {

Tensor zeros_state(const Tensor& p) {
  MemoryCategoryScope scope(MemoryCategory::optimizer);
  return zeros(p.shape(), p.dtype(), p.device());
}

// Groups slots by (device, decays) so each group is one backend call.
template <typename Fn>
void for_each_group(const NamedTensors& params, const std::vector<Tensor>& m, const std::vector<Tensor>* v,
                    bool matrices_only, Fn&& fn) {
  std::map<std::pair<std::string, bool>, std::vector<ParamSlots>> groups;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].second;
    if (!p.grad().defined()) continue;
    bool decays = !matrices_only || p.dim() >= 2;
    groups[{p.device().str(), decays}].push_back({p, p.grad(), m[i], v ? (*v)[i] : Tensor()});
  }
  for (auto& [key, slots] : groups) fn(Device::parse(key.first), key.second, slots);
}

}  // namespace

void load_named_state(const NamedTensors& params, const NamedTensors& state, const std::string& suffix,
                      std::vector<Tensor>& into) {
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = by_name.find(params[i].first + suffix);
    KILN_CHECK(it != by_name.end(), "optimizer state has no '", params[i].first + suffix, "'");
    KILN_CHECK(it->second.shape() == into[i].shape(), "optimizer state '", it->first, "' has shape ",
               shape_str(it->second.shape()), ", expected ", shape_str(into[i].shape()));
    copy_into(it->second, into[i]);
  }
}

AdamWArgs adamw_args(const AdamWOptions& o, double lr, int64_t step, bool decays) {
  AdamWArgs a;
  a.lr = float(lr);
  a.beta1 = float(o.beta1);
  a.beta2 = float(o.beta2);
  a.eps = float(o.eps);
  a.weight_decay = decays ? float(o.weight_decay) : 0.0f;
  a.step = step;
  return a;
}

void Optimizer::zero_grad() {
  for (auto& [n, p] : params_) p.zero_grad();
}

std::vector<Tensor> Optimizer::gradients() {
  std::vector<Tensor> params;
  for (auto& [n, p] : params_) params.push_back(p);
  return gradients_of(params);
}

AdamW::AdamW(NamedTensors params, double lr_, AdamWOptions opts) : Optimizer(std::move(params)), opts_(opts) {
  lr = lr_;
  for (auto& [n, p] : params_) {
    m_.push_back(zeros_state(p));
    v_.push_back(zeros_state(p));
  }
}

void AdamW::step() {
  NoGradGuard ng;
  ++step_;
  for_each_group(params_, m_, &v_, opts_.decay_matrices_only, [&](Device d, bool decays, auto& slots) {
    backend_for(d).adamw_step(slots, adamw_args(opts_, lr, step_, decays));
  });
}

NamedTensors AdamW::state() const { return adamw_state(params_, m_, v_); }

void AdamW::load_state(const NamedTensors& state, int64_t step) {
  load_adamw_state(params_, state, m_, v_);
  step_ = step;
}

NamedTensors adamw_state(const NamedTensors& params, const std::vector<Tensor>& m, const std::vector<Tensor>& v) {
  NamedTensors out;
  for (size_t i = 0; i < params.size(); ++i) {
    out.emplace_back(params[i].first + ".exp_avg", m[i]);
    out.emplace_back(params[i].first + ".exp_avg_sq", v[i]);
  }
  return out;
}

void load_adamw_state(const NamedTensors& params, const NamedTensors& state, std::vector<Tensor>& m,
                      std::vector<Tensor>& v) {
  load_named_state(params, state, ".exp_avg", m);
  load_named_state(params, state, ".exp_avg_sq", v);
}

SGD::SGD(NamedTensors params, double lr_, SgdOptions opts) : Optimizer(std::move(params)), opts_(opts) {
  lr = lr_;
  for (auto& [n, p] : params_) momentum_.push_back(opts_.momentum > 0 ? zeros_state(p) : Tensor());
}

void SGD::step() {
  NoGradGuard ng;
  ++step_;
  for_each_group(params_, momentum_, nullptr, false, [&](Device d, bool, auto& slots) {
    SgdArgs a;
    a.lr = float(lr);
    a.momentum = float(opts_.momentum);
    a.weight_decay = float(opts_.weight_decay);
    a.nesterov = opts_.nesterov;
    a.first_step = step_ == 1;
    backend_for(d).sgd_step(slots, a);
  });
}

NamedTensors SGD::state() const {
  NamedTensors out;
  if (opts_.momentum > 0)
    for (size_t i = 0; i < params_.size(); ++i) out.emplace_back(params_[i].first + ".momentum_buffer", momentum_[i]);
  return out;
}

void SGD::load_state(const NamedTensors& state, int64_t step) {
  if (opts_.momentum > 0) load_named_state(params_, state, ".momentum_buffer", momentum_);
  step_ = step;
}

double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double max_lr, double min_lr) {
  if (warmup > 0 && step < warmup) return max_lr * double(step + 1) / double(warmup);
  if (step >= total) return min_lr;
  double progress = double(step - warmup) / double(std::max<int64_t>(1, total - warmup));
  return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

double sum_of_squares(const std::vector<Tensor>& grads) {
  NoGradGuard ng;
  double total = 0.0;
  for (const Tensor& g : grads) total += sum(square(g)).item();
  return total;
}

void clip_to_norm(const std::vector<Tensor>& grads, double norm, double max_norm) {
  if (norm <= max_norm || norm <= 0) return;
  NoGradGuard ng;
  const double scale = max_norm / (norm + 1e-6);
  for (Tensor g : grads) backend_for(g).unary(UnaryOp::mul_scalar, g, g, scale);
}

double clip_gradients(const std::vector<Tensor>& grads, double max_norm) {
  const double norm = std::sqrt(sum_of_squares(grads));
  clip_to_norm(grads, norm, max_norm);
  return norm;
}

std::vector<std::vector<size_t>> gradient_buckets(const std::vector<Tensor>& params, int64_t bucket_bytes) {
  KILN_CHECK(bucket_bytes > 0, "gradient buckets must be positive in size, got ", bucket_bytes);
  std::vector<std::vector<size_t>> buckets;
  int64_t filled = bucket_bytes;
  for (size_t i = params.size(); i-- > 0;) {
    if (!params[i].requires_grad()) continue;
    if (filled >= bucket_bytes) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += params[i].numel() * int64_t(sizeof(float));
  }
  return buckets;
}

std::vector<Tensor> gradients_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  return clip_gradients(gradients_of(params), max_norm);
}

}  // namespace kiln::optim
