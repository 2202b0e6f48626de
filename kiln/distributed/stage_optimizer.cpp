#include "kiln/distributed/stage_optimizer.h"

#include <algorithm>
#include <map>

#include "kiln/autograd/grad_mode.h"
#include "kiln/backend/factory.h"

namespace kiln::distributed {

StageOptimizer::StageOptimizer(optim::NamedTensors model, const std::vector<std::vector<std::string>>& stage_params,
                               std::unique_ptr<optim::Optimizer> inner, Pipeline& pipeline, Communicator& world)
    : Optimizer(std::move(model)), inner_(std::move(inner)), pipeline_(pipeline), world_(world) {
  const int stages = pipeline_.layout().stages;
  KILN_CHECK(int(stage_params.size()) == stages, "pipeline: ", stage_params.size(), " stages' parameters for ",
             stages, " stages");
  own_names_ = stage_params[size_t(pipeline_.layout().stage)];
  for (const auto& [name, p] : params_) {
    int owner = -1;
    for (int s = 0; s < stages && owner < 0; ++s)
      if (std::find(stage_params[size_t(s)].begin(), stage_params[size_t(s)].end(), name) !=
          stage_params[size_t(s)].end())
        owner = s;
    KILN_CHECK(owner >= 0, "pipeline: no stage uses parameter ", name);
    owner_.push_back(owner);
  }
  lr = inner_->lr;
}

void StageOptimizer::step() {
  inner_->lr = lr;
  inner_->step();
  step_ = inner_->step_count();
}

void StageOptimizer::zero_grad() { inner_->zero_grad(); }

std::vector<Tensor> StageOptimizer::gradients() { return inner_->gradients(); }

optim::NamedTensors StageOptimizer::state() const {
  optim::NamedTensors mine = inner_->state();  // collective over the replicas under --zero 1
  const PipelineLayout& l = pipeline_.layout();
  if (l.replica != 0 || l.stages == 1) return mine;
  std::map<std::string, Tensor> by_name(mine.begin(), mine.end());
  // The suffixes of one parameter's entries ("<name>.exp_avg", ...), in the inner optimizer's order.
  std::vector<std::string> suffixes;
  for (const auto& [entry, t] : mine)
    if (entry.starts_with(own_names_.front() + ".")) suffixes.push_back(entry.substr(own_names_.front().size()));
  if (!l.first()) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (owner_[i] != l.stage) continue;
      world_.send(params_[i].second, 0);
      for (const std::string& suffix : suffixes) world_.send(by_name.at(params_[i].first + suffix), 0);
    }
    return mine;
  }
  // Rank 0: every parameter in model order, its weights from its stage.
  NoGradGuard ng;
  optim::NamedTensors all;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, p] = params_[i];
    const int from = l.rank_of(0, owner_[i]);
    if (owner_[i] != 0) {
      Tensor w = p;
      world_.recv(w, from);
    }
    for (const std::string& suffix : suffixes) {
      if (owner_[i] == 0) {
        all.emplace_back(name + suffix, by_name.at(name + suffix));
        continue;
      }
      Tensor s = Tensor::empty(p.shape(), DType::f32, p.device());
      world_.recv(s, from);
      all.emplace_back(name + suffix, s);
    }
  }
  return all;
}

void StageOptimizer::load_state(const optim::NamedTensors& state, int64_t step) {
  optim::NamedTensors own;
  for (const auto& [entry, t] : state)
    for (const std::string& name : own_names_)
      if (entry.starts_with(name + ".") && entry.find('.', name.size() + 1) == std::string::npos) own.emplace_back(entry, t);
  inner_->load_state(own, step);
  step_ = step;
}

}  // namespace kiln::distributed
