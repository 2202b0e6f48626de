#include "kiln/distributed/gradient_averager.h"

#include "kiln/autograd/grad_mode.h"
#include "kiln/backend/factory.h"
#include "kiln/optim/optimizer.h"

namespace kiln::distributed {

GradientAverager::GradientAverager(Communicator& comm, std::vector<Tensor> params, int64_t bucket_bytes)
    : comm_(comm), params_(std::move(params)) {
  bucket_of_.resize(params_.size());
  for (std::vector<size_t>& members : optim::gradient_buckets(params_, bucket_bytes)) {
    Bucket& b = buckets_.emplace_back();
    for (size_t i : members) {
      bucket_of_[i] = buckets_.size() - 1;
      b.numel += params_[i].numel();
    }
    b.params = std::move(members);
  }
  ready_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i)
    hook_ids_.push_back(params_[i].requires_grad()
                            ? params_[i].add_grad_ready_hook([this, i](const Tensor&) { on_grad_ready(i); })
                            : 0);
}

GradientAverager::~GradientAverager() {
  for (size_t i = 0; i < params_.size(); ++i)
    if (hook_ids_[i]) params_[i].remove_grad_ready_hook(hook_ids_[i]);
}

void GradientAverager::arm() {
  armed_ = true;
  launched_during_backward_ = 0;
}

void GradientAverager::on_grad_ready(size_t i) {
  if (!armed_ || ready_[i]) return;
  ready_[i] = true;
  Bucket& bucket = buckets_[bucket_of_[i]];
  if (++bucket.ready == bucket.params.size()) {
    launch(bucket);
    ++launched_during_backward_;
  }
}

// Flattens the bucket's gradients (f32, on their device; zeros for a
// gradient this rank lacks) and starts their mean.
void GradientAverager::launch(Bucket& bucket) {
  NoGradGuard ng;
  const Tensor& first = params_[bucket.params.front()];
  MemoryCategoryScope scope(MemoryCategory::grads);
  bucket.flat = zeros({bucket.numel}, DType::f32, first.device());
  int64_t offset = 0;
  for (size_t i : bucket.params) {
    const Tensor g = params_[i].grad();
    const int64_t n = params_[i].numel();
    if (g.defined()) {
      Tensor slot = bucket.flat.slice(0, offset, offset + n).view(g.shape());
      copy_into(g, slot);
    }
    offset += n;
  }
  bucket.pending = comm_.start_all_reduce(bucket.flat, Reduce::avg);
  bucket.launched = true;
}

void GradientAverager::finish() {
  NoGradGuard ng;
  for (Bucket& b : buckets_)  // in the same order on every rank
    if (!b.launched) launch(b);
  for (Bucket& b : buckets_) {
    b.pending->wait();
    int64_t offset = 0;
    for (size_t i : b.params) {
      Tensor p = params_[i];
      const int64_t n = p.numel();
      const Tensor mean = b.flat.slice(0, offset, offset + n).view(p.shape());
      if (!p.grad().defined()) {
        MemoryCategoryScope scope(MemoryCategory::grads);
        p.set_grad(zeros(p.shape(), p.dtype(), p.device()));
      }
      Tensor g = p.grad();
      copy_into(mean, g);
      offset += n;
    }
    b.flat = Tensor();
    b.pending.reset();
    b.launched = false;
    b.ready = 0;
  }
  ready_.assign(params_.size(), false);
  armed_ = false;
}

}  // namespace kiln::distributed
