// The recorded graph. Every differentiable op that runs while gradients are
// enabled attaches a GradNode to its output. A node knows how to turn the
// gradient of its output into gradients of its inputs, and where those go:
// to the input's own node, or, for a leaf that requires grad, into the leaf's
// .grad (accumulated, as in PyTorch).
//
// Saved tensors are kept detached (no grad_fn), so a node never owns its own
// output's history and no reference cycle forms.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

struct Edge {
  std::shared_ptr<GradNode> node;   // the input's producer, or
  std::shared_ptr<TensorImpl> leaf; // the leaf whose .grad receives the gradient
  bool active() const { return node || leaf; }
};

struct GradNode {
  virtual ~GradNode() = default;
  virtual const char* name() const = 0;
  // grad_output has the output's shape. Returns one gradient per input (in
  // the order of `next`); an undefined Tensor means "no gradient".
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  // Frees saved tensors once backward has run (unless retain_graph).
  virtual void release() {}

  std::vector<Edge> next;
  bool released = false;
  // Set by the engine before backward: true when the node is released right
  // after it (no retain_graph), so backward may consume its saved tensors,
  // e.g. scale a saved gradient in place instead of copying it.
  bool last_use = false;
};

// Edge to where an input's gradient must go (inactive if it needs none).
Edge gradient_edge(const Tensor& input);
// True if grad mode is on and any input needs a gradient.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
// Makes `node` the producer of `output`, with edges to `inputs`.
void attach_node(Tensor& output, std::shared_ptr<GradNode> node, std::initializer_list<const Tensor*> inputs);
// Detached view of a tensor for saving in a node.
inline Tensor saved(const Tensor& t) { return t.defined() ? t.detach() : t; }

// Runs backward from `root` (seeded with grad, or ones for a scalar).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

}  // namespace kiln
