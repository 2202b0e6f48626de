// Data parallelism's gradient averaging, as PyTorch DDP does it: parameters
// are grouped into buckets of about 25 MiB in reverse order (the order
// backward produces their gradients); when backward has finished every
// gradient of a bucket (the engine's grad-ready hooks), the bucket is
// flattened and its all-reduce launched, so communication runs while
// backward goes on. finish() waits for them all and writes the averages back.
//
// Every rank launches the same buckets in the same order, which the same
// model and the same graph guarantee; gradients a rank did not produce count
// as zeros, so no rank waits on a bucket another never sends.
#pragma once
#include <memory>
#include <vector>

#include "kiln/distributed/communicator.h"

namespace kiln::distributed {

class GradientAverager {
 public:
  static constexpr int64_t kDefaultBucketBytes = int64_t(25) << 20;
  GradientAverager(Communicator& comm, std::vector<Tensor> params, int64_t bucket_bytes = kDefaultBucketBytes);
  ~GradientAverager();
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  // Reduce during the next backward (the last micro-batch of a step; the
  // earlier ones only accumulate, as under DDP's no_sync()).
  void arm();
  // Launches what backward did not, waits for every bucket, and leaves each
  // parameter's .grad holding the mean over the ranks.
  void finish();

  int64_t bucket_count() const { return int64_t(buckets_.size()); }
  // Buckets launched while backward was still running, in the last step.
  int64_t launched_during_backward() const { return launched_during_backward_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    int64_t numel = 0;
    size_t ready = 0;
    bool launched = false;
    Tensor flat;
    std::unique_ptr<Pending> pending;
  };
  void on_grad_ready(size_t param);
  void launch(Bucket& bucket);

  Communicator& comm_;
  std::vector<Tensor> params_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_;
  std::vector<int64_t> hook_ids_;
  bool armed_ = false;
  int64_t launched_during_backward_ = 0;
};

}  // namespace kiln::distributed
