#include "kiln/autograd/checkpoint.h"

#include "kiln/amp/autocast.h"
#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/record.h"

namespace kiln {

namespace {

struct GeneratorState {
  Generator* gen;
  uint64_t seed, offset;
};

std::vector<GeneratorState> capture(const std::vector<Generator*>& gens) {
  std::vector<GeneratorState> s;
  for (Generator* g : gens) s.push_back({g, g->seed(), g->offset()});
  return s;
}

void restore(const std::vector<GeneratorState>& states) {
  for (const GeneratorState& s : states) s.gen->set_state(s.seed, s.offset);
}

}  // namespace

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const std::vector<Generator*>& generators) {
  if (!grad_enabled()) return fn(x);
  const std::vector<GeneratorState> before = capture(generators);
  const std::optional<DType> autocast = amp::autocast_dtype();
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn(x);
  }
  auto node_fn = [fn, saved_x = saved(x), x_needs_grad = x.requires_grad(), generators, before,
                  autocast](const Tensor& g) {
    const std::vector<GeneratorState> now = capture(generators);  // where the forward left them
    restore(before);
    Tensor x_again = saved_x.detach();
    if (x_needs_grad) x_again.set_requires_grad();
    Tensor y;
    {
      EnableGradGuard recording;
      amp::AutocastGuard same_autocast(autocast.value_or(DType::f32));
      y = fn(x_again);
    }
    restore(now);
    if (y.requires_grad()) y.backward(g);
    return std::vector<Tensor>{x_needs_grad ? x_again.grad() : Tensor()};
  };
  // Record even when x needs no gradient: the parameters inside fn do. A
  // stand-in input that "requires grad" gives the node an edge; the node
  // returns no gradient for it.
  Tensor anchor = x.requires_grad() ? x : Tensor::scalar(0.0).set_requires_grad();
  attach_node(out, std::make_shared<LambdaNode>("CheckpointBackward", node_fn), {&anchor});
  return out;
}

}  // namespace kiln
