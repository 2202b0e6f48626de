// Module: named parameters, child modules, and train/eval mode, as in
// torch.nn.Module. Parameter names compose with dots ("h.0.attn.c_attn.weight")
// so checkpoints use the same names as PyTorch's state_dict.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/autograd/ops.h"

namespace kiln::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  // Single-input modules override this; Sequential chains it.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Those that train (require grad): all but frozen ones (LoRA's base).
  NamedTensors trainable_parameters() const;
  int64_t parameter_count() const;
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Moves/casts every parameter in place (all handles see the change).
  void to(Device device);
  void to(DType dtype);
  // Copies values from `tensors` (by name); throws listing missing, unexpected
  // and mis-shaped names.
  void load_parameters(const NamedTensors& tensors);
  // The same for trainable_parameters() alone (a LoRA checkpoint holds the adapters).
  void load_trainable_parameters(const NamedTensors& tensors);
  // Calls f on this module and every module below it, parents first, with
  // the prefix of its parameters' names ("" for this one, "h.0.attn." ...).
  void for_each_module(const std::function<void(const std::string& prefix, Module&)>& f, const std::string& prefix = "");
  void for_each_module(const std::function<void(const std::string& prefix, const Module&)>& f,
                       const std::string& prefix = "") const;
  // Points every dropout at or below this module (layers' and LoRA
  // adapters') at `gen`: a run's one generator, which its checkpoints save
  // and activation checkpointing replays. A module that replays its own
  // blocks keeps the pointer too (overrides call this one).
  virtual void use_dropout_generator(const std::shared_ptr<Generator>& gen);

 protected:
  // Called on each module by to(device) before the parameters move: a
  // module holding weights in a form only the CPU reads makes them
  // parameters again here (WeightModule).
  virtual void before_move(Device) {}
  Tensor register_parameter(const std::string& name, Tensor t);
  // Forgets a parameter (its weights now live elsewhere: quantized).
  void drop_parameter(const std::string& name);
  // Forgets a child module (a merged LoRA adapter).
  void drop_module(const std::string& name);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out) const;
  static void load_into(NamedTensors mine, const NamedTensors& tensors);
  NamedTensors params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Replaces t's storage with a copy on `device` in `dtype` (keeps its handle).
void move_tensor_in_place(Tensor& t, Device device, DType dtype);

}  // namespace kiln::nn
