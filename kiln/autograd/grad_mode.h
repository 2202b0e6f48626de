// Gradient recording is on by default; NoGradGuard turns it off for a scope
// (evaluation, optimizer updates), like torch.no_grad().
#pragma once

namespace kiln {

bool grad_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Turns gradient recording on for a scope (activation checkpointing re-runs
// a forward inside backward, where recording is off).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace kiln
