// Activation checkpointing: trade compute for memory. checkpoint(fn, x)
// returns fn(x), but runs fn without recording, so nothing fn computes
// inside is kept; its node saves only x (and the state of the random
// generators fn draws from). Backward re-runs fn on x with recording on, in
// the same autocast state and from the same generator states (so dropout
// draws the same masks), backpropagates the incoming gradient through that
// fresh graph (parameters inside fn get their gradients there), and hands
// x's gradient on.
//
// The gradients are bitwise those of the plain call on the CPU: the same
// ops run on the same inputs in the same order. fn must be a pure function
// of x, its parameters and the listed generators.
#pragma once
#include <functional>
#include <vector>

#include "kiln/core/random.h"
#include "kiln/core/tensor.h"

namespace kiln {

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const std::vector<Generator*>& generators = {});

}  // namespace kiln
