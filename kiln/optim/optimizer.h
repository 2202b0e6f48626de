// Optimizers keep their state (moments, step) as named tensors so that
// checkpoints save and restore it exactly. Each step is one backend call per
// device and decay group, so the CUDA backend can update every parameter in a
// few launches.
#pragma once
#include "kiln/nn/module.h"

namespace kiln::optim {

using nn::NamedTensors;

class Optimizer {
 public:
  explicit Optimizer(NamedTensors params) : params_(std::move(params)) {}
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  virtual void zero_grad();
  // The gradients the next step() reads, complete once this returns: the
  // parameters' .grad, or where an optimizer moved them (offload: host
  // copies). Loss-scale unscaling and clipping work on these, in place.
  virtual std::vector<Tensor> gradients();
  double lr = 1e-3;
  int64_t step_count() const { return step_; }

  // Optimizer state for checkpoints ("<param>.exp_avg", ...), plus the step.
  virtual NamedTensors state() const = 0;
  virtual void load_state(const NamedTensors& state, int64_t step) = 0;
  // Optimizers that keep their own fp32 copy of the weights (offload) return
  // it here: checkpoints save it as the model, and resume restores it.
  virtual const NamedTensors* master_weights() const { return nullptr; }
  virtual void load_master_weights(const NamedTensors& weights) {}

 protected:
  NamedTensors params_;
  int64_t step_ = 0;
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  // GPT practice: decay only matrices (dim >= 2), never biases or norms.
  bool decay_matrices_only = false;
};

class AdamW : public Optimizer {
 public:
  AdamW(NamedTensors params, double lr, AdamWOptions opts = {});
  void step() override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& state, int64_t step) override;

 private:
  AdamWOptions opts_;
  std::vector<Tensor> m_, v_;
};

struct SgdOptions {
  double momentum = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(NamedTensors params, double lr, SgdOptions opts = {});
  void step() override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& state, int64_t step) override;

 private:
  SgdOptions opts_;
  std::vector<Tensor> momentum_;
};

// The backend's arguments for an AdamW step (weight decay only where
// `decays`), shared by AdamW and OffloadAdamW.
AdamWArgs adamw_args(const AdamWOptions& options, double lr, int64_t step, bool decays);

// AdamW's checkpoint state ("<param>.exp_avg", "<param>.exp_avg_sq"), and
// loading it back: shared by AdamW and OffloadAdamW, whose checkpoints are
// interchangeable.
NamedTensors adamw_state(const NamedTensors& params, const std::vector<Tensor>& m, const std::vector<Tensor>& v);
void load_adamw_state(const NamedTensors& params, const NamedTensors& state, std::vector<Tensor>& m,
                      std::vector<Tensor>& v);

// Copies state["<param name><suffix>"] into into[i] for each parameter;
// throws naming a missing or mis-shaped entry.
void load_named_state(const NamedTensors& params, const NamedTensors& state, const std::string& suffix,
                      std::vector<Tensor>& into);

// Linear warmup to `max_lr`, then cosine decay to `min_lr` at `total_steps`.
double warmup_cosine_lr(int64_t step, int64_t warmup_steps, int64_t total_steps, double max_lr, double min_lr);

// Scales the gradients in place so their global L2 norm is at most max_norm
// (as torch.nn.utils.clip_grad_norm_). Returns the norm before clipping.
double clip_gradients(const std::vector<Tensor>& grads, double max_norm);
// Its two halves, for gradients spread over ranks (pipeline stages): the
// sum of the squares of every element (in a fixed order: reproducible), and
// scaling so that gradients of global norm `norm` have at most max_norm.
double sum_of_squares(const std::vector<Tensor>& grads);
void clip_to_norm(const std::vector<Tensor>& grads, double norm, double max_norm);
// The same over the parameters' .grad.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// Parameters grouped for moving gradients while backward runs (offload,
// data parallelism): buckets of about `bucket_bytes` of f32 gradient, in
// reverse order, the order backward produces them. Parameters that need no
// gradient are left out. Each bucket lists parameter indices.
std::vector<std::vector<size_t>> gradient_buckets(const std::vector<Tensor>& params, int64_t bucket_bytes);
// The defined .grad of each parameter, in order.
std::vector<Tensor> gradients_of(const std::vector<Tensor>& params);

}  // namespace kiln::optim
