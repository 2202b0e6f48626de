#include "kiln/nn/module.h"

#include "kiln/nn/init.h"

#include <map>
#include <utility>

namespace kiln::nn {

Tensor Module::forward(const Tensor&) { KILN_FAIL("this module has no single-input forward()"); }

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  {
    // Parameters are booked as weights in the allocator's statistics.
    MemoryCategoryScope scope(MemoryCategory::weights);
    const Device where = MetaParametersGuard::active() ? Device::meta() : t.device();
    Tensor owned = copy_to(t, where, t.dtype());
    t = owned;
  }
  t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

void Module::drop_parameter(const std::string& name) {
  std::erase_if(params_, [&](const auto& p) { return p.first == name; });
}

void Module::for_each_module(const std::function<void(const std::string&, Module&)>& f, const std::string& prefix) {
  f(prefix, *this);
  for (auto& [name, child] : children_) child->for_each_module(f, prefix + name + ".");
}

void Module::for_each_module(const std::function<void(const std::string&, const Module&)>& f,
                             const std::string& prefix) const {
  f(prefix, *this);
  for (const auto& [name, child] : children_) std::as_const(*child).for_each_module(f, prefix + name + ".");
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, p] : params_) out.emplace_back(prefix + name, p);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, p] : named_parameters()) out.push_back(p);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::use_dropout_generator(const std::shared_ptr<Generator>& gen) {
  for (auto& [n, c] : children_) c->use_dropout_generator(gen);
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.zero_grad();
}

void move_tensor_in_place(Tensor& t, Device device, DType dtype) {
  if (t.device() == device && t.dtype() == dtype) return;
  MemoryCategoryScope scope(MemoryCategory::weights);
  Tensor moved = copy_to(t, device, dtype);
  TensorImpl& impl = t.impl();
  impl.storage = moved.impl().storage;
  impl.offset = 0;
  impl.strides = moved.strides();
  impl.dtype = dtype;
  impl.grad.reset();
}

void Module::to(Device device) {
  for_each_module([&](const std::string&, Module& m) { m.before_move(device); });
  for (auto& [n, p] : named_parameters()) move_tensor_in_place(p, device, p.dtype());
}

void Module::to(DType dtype) {
  for (auto& [n, p] : named_parameters()) move_tensor_in_place(p, p.device(), dtype);
}

void Module::drop_module(const std::string& name) {
  std::erase_if(children_, [&](const auto& child) { return child.first == name; });
}

NamedTensors Module::trainable_parameters() const {
  NamedTensors out;
  for (const auto& [name, p] : named_parameters())
    if (p.requires_grad()) out.emplace_back(name, p);
  return out;
}

void Module::load_parameters(const NamedTensors& tensors) { load_into(named_parameters(), tensors); }
void Module::load_trainable_parameters(const NamedTensors& tensors) { load_into(trainable_parameters(), tensors); }

void Module::load_into(NamedTensors mine, const NamedTensors& tensors) {
  std::map<std::string, Tensor> given(tensors.begin(), tensors.end());
  std::string problems;
  for (auto& [name, p] : mine) {
    auto it = given.find(name);
    if (it == given.end()) {
      problems += "\n  missing: " + name;
      continue;
    }
    if (it->second.shape() != p.shape())
      problems += "\n  shape of " + name + ": expected " + shape_str(p.shape()) + ", got " +
                  shape_str(it->second.shape());
    given.erase(it);
  }
  for (auto& [name, t] : given) problems += "\n  unexpected: " + name;
  KILN_CHECK(problems.empty(), "weights do not match the model:", problems);
  NoGradGuard ng;
  std::map<std::string, Tensor> by_name(tensors.begin(), tensors.end());
  for (auto& [name, p] : mine) copy_into(by_name.at(name), p);
}

}  // namespace kiln::nn
