#include "kiln/optim/offload.h"

#include <algorithm>
#include <map>

namespace kiln::optim {

namespace {

// A meta parameter (planning) has no values to copy: its master is just sized.
Tensor host_f32(const Tensor& like, Device host, bool copy_values) {
  const bool has_values = like.device().type != DeviceType::meta;
  return copy_values && has_values ? copy_to(like, host, DType::f32) : zeros(like.shape(), DType::f32, host);
}

}  // namespace

OffloadAdamW::OffloadAdamW(NamedTensors params, double lr_, AdamWOptions opts, Device host, int64_t bucket_bytes)
    : Optimizer(std::move(params)), opts_(opts), host_(host) {
  KILN_CHECK(host_.is_cpu() || host_.type == DeviceType::meta,
             "offload: the optimizer state must live in host memory, not on ", host_.str());
  lr = lr_;
  NoGradGuard ng;
  {
    MemoryCategoryScope scope(MemoryCategory::optimizer);
    for (auto& [name, p] : params_) {
      master_.emplace_back(name, host_f32(p, host_, true));
      m_.push_back(host_f32(p, host_, false));
      v_.push_back(host_f32(p, host_, false));
      host_grads_.push_back(host_f32(p, host_, false));
    }
  }
  if (pinned())
    for (size_t i = 0; i < params_.size(); ++i)
      for (const Tensor* t : {&master_[i].second, &m_[i], &v_[i], &host_grads_[i]})
        backend_for(params_[i].second).pin_host_memory(*t);
  std::vector<Tensor> tensors;
  for (auto& [name, p] : params_) tensors.push_back(p);
  bucket_of_.resize(params_.size());
  for (std::vector<size_t>& members : optim::gradient_buckets(tensors, bucket_bytes)) {
    for (size_t i : members) bucket_of_[i] = buckets_.size();
    buckets_.push_back({std::move(members)});
  }
  ready_.assign(params_.size(), false);
  on_host_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].second.requires_grad())
      hook_ids_.push_back(params_[i].second.add_grad_ready_hook([this, i](const Tensor&) { on_grad_ready(i); }));
}

OffloadAdamW::~OffloadAdamW() {
  size_t hook = 0;
  for (auto& [name, p] : params_)
    if (p.requires_grad()) p.remove_grad_ready_hook(hook_ids_[hook++]);
  if (!pinned()) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    Backend& device = backend_for(params_[i].second);
    device.finish_host_copies(params_[i].second.device().index);
    for (const Tensor* t : {&master_[i].second, &m_[i], &v_[i], &host_grads_[i]}) device.unpin_host_memory(*t);
  }
}

bool OffloadAdamW::pinned() const {
  return !params_.empty() && params_.front().second.device().type == DeviceType::cuda && host_.is_cpu();
}

void OffloadAdamW::on_grad_ready(size_t i) {
  if (ready_[i]) return;  // more gradient for a parameter already counted: sent with the rest later
  ready_[i] = true;
  Bucket& bucket = buckets_[bucket_of_[i]];
  if (++bucket.ready < bucket.params.size()) return;
  for (size_t p : bucket.params) send_to_host(p);
  for (size_t p : bucket.params) ready_[p] = false;
  bucket.ready = 0;
  ++sent_during_backward_;
}

void OffloadAdamW::send_to_host(size_t i) {
  Tensor p = params_[i].second;
  const Tensor g = p.grad();
  if (!g.defined()) return;
  NoGradGuard ng;
  if (!on_host_[i]) {
    backend_for(g).copy_to_host_async(g, host_grads_[i]);  // to f32; lands by collect_gradients()
    on_host_[i] = true;
  } else {  // a later micro-batch: add to what earlier ones sent
    backend_for(g).finish_host_copies(g.device().index);
    MemoryCategoryScope scope(MemoryCategory::grads);
    Tensor more = copy_to(g, host_, DType::f32);
    backend_for(host_).binary(BinaryOp::add, host_grads_[i], more, host_grads_[i]);
  }
  p.zero_grad();  // the device block goes back to the pool (on CUDA, once its copy has landed)
}

void OffloadAdamW::collect_gradients() {
  std::vector<Device> devices;
  for (size_t i = 0; i < params_.size(); ++i) {
    send_to_host(i);  // partial buckets, unused parameters, gradients set by hand
    const Device d = params_[i].second.device();
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  }
  for (const Device& d : devices) backend_for(d).finish_host_copies(d.index);
  for (Bucket& b : buckets_) b.ready = 0;
  ready_.assign(params_.size(), false);
}

void OffloadAdamW::zero_grad() {
  Optimizer::zero_grad();
  ready_.assign(params_.size(), false);
  on_host_.assign(params_.size(), false);
  for (Bucket& b : buckets_) b.ready = 0;
  sent_during_backward_ = 0;
}

std::vector<Tensor> OffloadAdamW::gradients() {
  collect_gradients();
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params_.size(); ++i)
    if (on_host_[i]) grads.push_back(host_grads_[i]);
  return grads;
}

void OffloadAdamW::step() {
  NoGradGuard ng;
  collect_gradients();
  ++step_;
  for (const Bucket& bucket : buckets_) {
    // Grouped by weight decay: one CPU backend call per group, as AdamW.
    std::map<bool, std::vector<ParamSlots>> groups;
    for (size_t i : bucket.params) {
      if (!on_host_[i]) continue;
      const bool decays = !opts_.decay_matrices_only || params_[i].second.dim() >= 2;
      groups[decays].push_back({master_[i].second, host_grads_[i], m_[i], v_[i]});
    }
    for (auto& [decays, slots] : groups) backend_for(host_).adamw_step(slots, adamw_args(opts_, lr, step_, decays));
    for (size_t i : bucket.params) {
      Tensor p = params_[i].second;
      if (on_host_[i]) copy_into(master_[i].second, p);  // host -> device, to the parameter's dtype (async on CUDA)
    }
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
