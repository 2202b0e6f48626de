#include "kiln/optim/offload.h"

#include <map>

namespace kiln::optim {

namespace {

// A meta parameter (planning) has no values to copy: its master is just sized.
Tensor host_f32(const Tensor& like, Device host, bool copy_values) {
  const bool has_values = like.device().type != DeviceType::meta;
  return copy_values && has_values ? copy_to(like, host, DType::f32) : zeros(like.shape(), DType::f32, host);
}

}  // namespace

OffloadAdamW::OffloadAdamW(NamedTensors params, double lr_, AdamWOptions opts, Device host)
    : Optimizer(std::move(params)), opts_(opts), host_(host) {
  KILN_CHECK(host_.is_cpu() || host_.type == DeviceType::meta,
             "offload: the optimizer state must live in host memory, not on ", host_.str());
  lr = lr_;
  NoGradGuard ng;
  MemoryCategoryScope scope(MemoryCategory::optimizer);
  for (auto& [name, p] : params_) {
    master_.emplace_back(name, host_f32(p, host_, true));
    m_.push_back(host_f32(p, host_, false));
    v_.push_back(host_f32(p, host_, false));
    host_grads_.push_back(host_f32(p, host_, false));
  }
}

void OffloadAdamW::step() {
  NoGradGuard ng;
  ++step_;
  // Grouped by weight decay: one CPU backend call per group, as AdamW.
  std::map<bool, std::vector<ParamSlots>> groups;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    if (!p.grad().defined()) continue;
    copy_into(p.grad(), host_grads_[i]);  // device -> host, to f32
    const bool decays = !opts_.decay_matrices_only || p.dim() >= 2;
    groups[decays].push_back({master_[i].second, host_grads_[i], m_[i], v_[i]});
  }
  for (auto& [decays, slots] : groups) backend_for(host_).adamw_step(slots, adamw_args(opts_, lr, step_, decays));
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].second;
    if (p.grad().defined()) copy_into(master_[i].second, p);  // host -> device, to the parameter's dtype
  }
}

NamedTensors OffloadAdamW::state() const { return adamw_state(params_, m_, v_); }

void OffloadAdamW::load_state(const NamedTensors& state, int64_t step) {
  load_adamw_state(params_, state, m_, v_);
  step_ = step;
}

void OffloadAdamW::load_master_weights(const NamedTensors& weights) {
  std::vector<Tensor> into;
  for (auto& [name, master] : master_) into.push_back(master);
  load_named_state(params_, weights, "", into);
}

}  // namespace kiln::optim
