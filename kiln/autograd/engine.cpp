// Reverse-mode engine: Kahn's algorithm over the nodes reachable from the
// root, so each node runs once, after all gradients flowing into it have
// been summed.
#include <unordered_map>

#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/node.h"
#include "kiln/autograd/ops.h"
#include "kiln/backend/factory.h"

namespace kiln {

namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }
EnableGradGuard::EnableGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = previous_; }

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  if (t.grad_fn()) return {t.grad_fn(), nullptr};
  if (t.requires_grad()) return {nullptr, t.impl_ptr()};
  return {};
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void attach_node(Tensor& output, std::shared_ptr<GradNode> node, std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs) node->next.push_back(t ? gradient_edge(*t) : Edge{});
  TensorImpl& impl = output.impl();
  impl.grad_fn = std::move(node);
  impl.requires_grad = true;
}

namespace {

void accumulate_into_leaf(TensorImpl& leaf, const Tensor& g) {
  KILN_CHECK(g.shape() == leaf.shape, "gradient of shape ", shape_str(g.shape()), " does not match its leaf's shape ",
             shape_str(leaf.shape));
  if (!leaf.grad) {
    // A fresh buffer: the leaf must not share storage with a temporary.
    MemoryCategoryScope scope(MemoryCategory::grads);
    Tensor fresh = copy_to(g, g.device(), leaf.dtype);
    leaf.grad = fresh.impl_ptr();
  } else {
    Tensor acc(leaf.grad);
    Tensor gg = g.dtype() == acc.dtype() ? g : copy_to(g, g.device(), acc.dtype());
    backend_for(acc).binary(BinaryOp::add, acc, gg, acc);
  }
}

void fire_grad_ready_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  if (leaf->grad_ready_hooks.empty() || !leaf->grad) return;
  const Tensor t(leaf);
  auto hooks = leaf->grad_ready_hooks;  // a hook may remove itself
  for (auto& [id, hook] : hooks) hook(t);
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  KILN_CHECK(root.requires_grad(), "backward: the tensor does not require grad and has no grad_fn "
             "(did the graph run under NoGradGuard, or do no inputs require grad?)");
  Tensor grad = grad_in;
  if (!grad.defined()) {
    KILN_CHECK(root.numel() == 1, "backward: grad can be implied only for a single-element output; this one has "
               "shape ", shape_str(root.shape()), ". Pass a gradient of that shape.");
    grad = ones(root.shape(), root.dtype(), root.device());
  }
  KILN_CHECK(grad.shape() == root.shape(), "backward: gradient shape ", shape_str(grad.shape()),
             " does not match the output's shape ", shape_str(root.shape()));
  NoGradGuard no_grad;  // gradients themselves are not recorded
  if (!root.grad_fn()) {
    accumulate_into_leaf(root.impl(), grad);
    fire_grad_ready_hooks(root.impl_ptr());
    return;
  }
  // Count, for each node, how many edges lead into it; and for each leaf
  // with grad-ready hooks, how many gradients it will receive.
  std::unordered_map<GradNode*, int> dependencies;
  std::unordered_map<TensorImpl*, int> leaf_edges;
  std::vector<GradNode*> stack{root.grad_fn().get()};
  dependencies[root.grad_fn().get()] = 0;
  while (!stack.empty()) {
    GradNode* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (e.leaf && !e.leaf->grad_ready_hooks.empty()) ++leaf_edges[e.leaf.get()];
      if (!e.node) continue;
      if (dependencies.find(e.node.get()) == dependencies.end()) {
        dependencies[e.node.get()] = 0;
        stack.push_back(e.node.get());
      }
      dependencies[e.node.get()] += 1;
    }
  }
  std::unordered_map<GradNode*, Tensor> pending{{root.grad_fn().get(), grad}};
  std::vector<std::shared_ptr<GradNode>> ready{root.grad_fn()};
  while (!ready.empty()) {
    std::shared_ptr<GradNode> node = ready.back();
    ready.pop_back();
    KILN_CHECK(!node->released, "backward through ", node->name(), " a second time: its saved tensors were "
               "freed by the first backward. Call backward(grad, /*retain_graph=*/true) the first time if you "
               "need to run backward twice.");
    Tensor g = std::move(pending[node.get()]);
    pending.erase(node.get());
    node->last_use = !retain_graph;
    std::vector<Tensor> grads = node->backward(g);
    KILN_CHECK(grads.size() == node->next.size(), node->name(), " returned ", grads.size(), " gradients for ",
               node->next.size(), " inputs");
    if (!retain_graph) {
      node->release();
      node->released = true;
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = node->next[i];
      if (e.leaf) {
        if (grads[i].defined()) accumulate_into_leaf(*e.leaf, grads[i]);
        auto count = leaf_edges.find(e.leaf.get());
        if (count != leaf_edges.end() && --count->second == 0) fire_grad_ready_hooks(e.leaf);
        continue;
      }
      if (!e.active() || !grads[i].defined()) {
        if (e.node && --dependencies[e.node.get()] == 0 && pending.count(e.node.get())) ready.push_back(e.node);
        continue;
      }
      auto it = pending.find(e.node.get());
      if (it == pending.end()) {
        pending.emplace(e.node.get(), grads[i]);
      } else {
        it->second = add(it->second, grads[i]);
      }
      if (--dependencies[e.node.get()] == 0) ready.push_back(e.node);
    }
  }
}

}  // namespace kiln
