#include "kiln/distributed/zero.h"

#include <map>

#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/ops.h"
#include "kiln/backend/factory.h"

namespace kiln::distributed {

namespace {

Tensor flat_view(const Tensor& t) { return t.view({t.numel()}); }

}  // namespace

ShardedAdamW::ShardedAdamW(optim::NamedTensors params, double lr_, optim::AdamWOptions opts, Communicator& comm)
    : Optimizer(std::move(params)), opts_(opts), comm_(comm) {
  lr = lr_;
  for (auto& [name, p] : params_) {
    KILN_CHECK(p.dtype() == DType::f32 && p.is_contiguous(), "--zero 1 needs contiguous f32 parameters; ", name,
               " is ", dtype_name(p.dtype()), " (train with fp32 or autocast precision, without --offload)");
    offsets_.push_back(total_);
    total_ += p.numel();
  }
  const int64_t W = comm_.world_size();
  shard_ = (total_ + W - 1) / W;
  begin_ = std::min(total_, shard_ * comm_.rank());
  end_ = std::min(total_, begin_ + shard_);
  const Device device = params_.empty() ? Device::cpu() : params_.front().second.device();
  MemoryCategoryScope scope(MemoryCategory::optimizer);
  m_ = zeros({shard_}, DType::f32, device);
  v_ = zeros({shard_}, DType::f32, device);
}

std::pair<int64_t, int64_t> ShardedAdamW::owned_part(size_t i) const {
  const int64_t first = std::max(begin_, offsets_[i]), last = std::min(end_, offsets_[i] + params_[i].second.numel());
  if (first >= last) return {0, 0};
  return {first - offsets_[i], last - offsets_[i]};
}

void ShardedAdamW::step() {
  NoGradGuard ng;
  ++step_;
  // This rank's elements: slices of the parameters, their gradients and the moments, grouped by weight decay.
  std::map<bool, std::vector<ParamSlots>> groups;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    auto [first, last] = owned_part(i);
    if (first == last || !p.grad().defined()) continue;
    const int64_t at = offsets_[i] + first - begin_;
    const bool decays = !opts_.decay_matrices_only || p.dim() >= 2;
    groups[decays].push_back({flat_view(p).slice(0, first, last), flat_view(p.grad()).slice(0, first, last),
                              m_.slice(0, at, at + last - first), v_.slice(0, at, at + last - first)});
  }
  for (auto& [decays, slots] : groups)
    backend_for(slots.front().param).adamw_step(slots, optim::adamw_args(opts_, lr, step_, decays));
  // Everyone's updated slice to everyone: pack mine, gather all, unpack the others'.
  const Device device = m_.device();
  Tensor mine = zeros({shard_}, DType::f32, device), all = Tensor::empty({shard_ * comm_.world_size()}, DType::f32, device);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto [first, last] = owned_part(i);
    if (first == last) continue;
    Tensor into = mine.slice(0, offsets_[i] + first - begin_, offsets_[i] + last - begin_);
    copy_into(flat_view(params_[i].second).slice(0, first, last), into);
  }
  comm_.all_gather(mine, all);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor dst = flat_view(params_[i].second);
    copy_into(all.slice(0, offsets_[i], offsets_[i] + dst.numel()), dst);
  }
}

optim::NamedTensors ShardedAdamW::state() const {
  const int64_t W = comm_.world_size();
  optim::NamedTensors out;
  std::vector<Tensor> full;
  for (const Tensor* moment : {&m_, &v_}) {
    Tensor all = Tensor::empty({shard_ * W}, DType::f32, m_.device());
    comm_.all_gather(*moment, all);
    full.push_back(all);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    for (size_t k = 0; k < 2; ++k)
      out.emplace_back(params_[i].first + (k == 0 ? ".exp_avg" : ".exp_avg_sq"),
                       full[k].slice(0, offsets_[i], offsets_[i] + p.numel()).view(p.shape()));
  }
  return out;
}

void ShardedAdamW::load_state(const optim::NamedTensors& state, int64_t step) {
  std::vector<Tensor> m, v;
  for (auto& [name, p] : params_) {
    m.push_back(zeros(p.shape(), DType::f32, p.device()));
    v.push_back(zeros(p.shape(), DType::f32, p.device()));
  }
  optim::load_adamw_state(params_, state, m, v);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto [first, last] = owned_part(i);
    if (first == last) continue;
    const int64_t at = offsets_[i] + first - begin_;
    for (auto [from, to] : {std::pair{&m[i], &m_}, std::pair{&v[i], &v_}}) {
      Tensor dst = to->slice(0, at, at + last - first);
      copy_into(flat_view(*from).slice(0, first, last), dst);
    }
  }
  step_ = step;
}

}  // namespace kiln::distributed
