// AdamW with its state offloaded to host memory, in the style of
// ZeRO-Offload: the fp32 master weights, both moments and a host copy of
// the gradients live in (pinned, on CUDA) host memory; the device keeps the
// parameters in their own dtype (which may be bf16/fp16) and, during
// backward, only the gradients not yet sent.
//
//  1. Backward: parameters are grouped into buckets of about `bucket_bytes`
//     in reverse order (the order backward produces them). When every
//     gradient of a bucket is ready (a grad-ready hook), the bucket is sent
//     to the host f32 buffers and the device gradients are freed; on CUDA
//     the copies run on a transfer stream, overlapping the rest of backward.
//     Micro-batches after the first add into the host buffers.
//  2. gradients() waits for the copies and returns the host buffers, where
//     the loss scaler unscales and clipping scales, on the CPU.
//  3. step() runs AdamW on the CPU backend (vectorised, on all threads) one
//     bucket at a time and sends each bucket's updated weights back (an
//     asynchronous upload on CUDA) while the CPU updates the next bucket.
//
// That saves 8 bytes per parameter of device memory in fp32 training (the
// moments), 12 with 2-byte parameters (moments + master), plus all but about
// a bucket of the gradients. See docs/MEMORY.md.
#pragma once
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

class OffloadAdamW : public Optimizer {
 public:
  static constexpr int64_t kDefaultBucketBytes = int64_t(25) << 20;  // PyTorch DDP's default

  // `host`: the CPU (cpu:0), or meta:1 when the planner runs a step on meta.
  OffloadAdamW(NamedTensors params, double lr, AdamWOptions opts = {}, Device host = Device::cpu(),
               int64_t bucket_bytes = kDefaultBucketBytes);
  ~OffloadAdamW() override;
  OffloadAdamW(const OffloadAdamW&) = delete;
  OffloadAdamW& operator=(const OffloadAdamW&) = delete;

  void step() override;
  void zero_grad() override;
  std::vector<Tensor> gradients() override;
  // The same names as AdamW's ("<param>.exp_avg", ".exp_avg_sq"), so a
  // checkpoint moves between the two.
  NamedTensors state() const override;
  void load_state(const NamedTensors& state, int64_t step) override;
  // The fp32 master weights: what a checkpoint saves as the model.
  const NamedTensors* master_weights() const override { return &master_; }
  void load_master_weights(const NamedTensors& weights) override;

  int64_t bucket_count() const { return int64_t(buckets_.size()); }
  // Buckets sent to the host while backward was still running, this step.
  int64_t buckets_sent_during_backward() const { return sent_during_backward_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    size_t ready = 0;
  };
  void on_grad_ready(size_t param);
  void send_to_host(size_t param);  // device .grad -> host buffer, device .grad freed
  void collect_gradients();         // sends what is left, waits for every copy
  bool pinned() const;

  AdamWOptions opts_;
  Device host_;
  NamedTensors master_;
  std::vector<Tensor> m_, v_, host_grads_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_, on_host_;  // per parameter, this step
  std::vector<int64_t> hook_ids_;
  int64_t sent_during_backward_ = 0;
};

}  // namespace kiln::optim
