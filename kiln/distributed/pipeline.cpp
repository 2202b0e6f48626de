#include "kiln/distributed/pipeline.h"

#include <deque>
#include <limits>

#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/ops.h"
#include "kiln/backend/factory.h"

namespace kiln::distributed {

PipelineLayout pipeline_layout(int rank, int world_size, int stages) {
  KILN_CHECK(stages >= 1, "--pipeline-stages must be at least 1, got ", stages);
  KILN_CHECK(world_size % stages == 0, "--pipeline-stages ", stages, " does not divide the ", world_size,
             " ranks: launch a multiple of ", stages, " processes (replicas x stages)");
  PipelineLayout l;
  l.stages = stages;
  l.replicas = world_size / stages;
  l.stage = rank % stages;
  l.replica = rank / stages;
  return l;
}

std::vector<int64_t> balance_stages(const std::vector<double>& layer_costs, int stages) {
  const int64_t L = int64_t(layer_costs.size());
  KILN_CHECK(stages >= 1 && stages <= L, "cannot split ", L, " layers into ", stages, " pipeline stages: use at most ",
             L, " stages");
  std::vector<double> prefix(size_t(L) + 1, 0.0);
  for (int64_t i = 0; i < L; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + layer_costs[size_t(i)];
  auto cost = [&](int64_t a, int64_t b) { return prefix[size_t(b)] - prefix[size_t(a)]; };
  // worst[s][i]: the least possible cost of the dearest stage when the
  // first i layers form s stages; cut[s][i] is where the last of them starts.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> worst(size_t(stages) + 1, std::vector<double>(size_t(L) + 1, inf));
  std::vector<std::vector<int64_t>> cut(size_t(stages) + 1, std::vector<int64_t>(size_t(L) + 1, 0));
  worst[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int64_t i = s; i <= L; ++i)
      for (int64_t j = s - 1; j < i; ++j) {
        const double w = std::max(worst[size_t(s) - 1][size_t(j)], cost(j, i));
        if (w < worst[size_t(s)][size_t(i)]) {
          worst[size_t(s)][size_t(i)] = w;
          cut[size_t(s)][size_t(i)] = j;
        }
      }
  std::vector<int64_t> bounds(size_t(stages) + 1);
  bounds[size_t(stages)] = L;
  for (int s = stages; s >= 1; --s) bounds[size_t(s) - 1] = cut[size_t(s)][size_t(bounds[size_t(s)])];
  return bounds;
}

double bubble_fraction(int stages, int64_t micro_batches) {
  return double(stages - 1) / double(micro_batches + stages - 1);
}

Pipeline::Pipeline(Communicator& world, int stages)
    : world_(world), layout_(pipeline_layout(world.rank(), world.world_size(), stages)) {
  replicas_ = world_.split(layout_.stage, layout_.replica);
  stages_ = world_.split(layout_.replica, layout_.stage);
}

namespace {

// A micro-batch in flight on this stage: what came in and what went out.
struct InFlight {
  Tensor in, out;
  double weight = 1;
};

}  // namespace

double Pipeline::train_step(const Tensor& x, const Tensor& y, int64_t micro, const StageWork& work) {
  const int64_t B = x.size(0), M = (B + micro - 1) / micro;
  const int S = layout_.stages, s = layout_.stage;
  const int prev = layout_.rank_of(layout_.replica, s - 1), next = layout_.rank_of(layout_.replica, s + 1);
  auto rows = [&](int64_t i) { return std::min(micro, B - i * micro); };
  auto slice_of = [&](const Tensor& t, int64_t i) { return t.slice(0, i * micro, i * micro + rows(i)); };
  auto activation = [&](int64_t i) { return Tensor::empty(work.activation_shape(rows(i)), DType::f32, work.device); };
  // What goes on the wire: the output as contiguous f32, cut from the graph.
  auto wire = [](const Tensor& t) {
    NoGradGuard ng;
    return t.dtype() == DType::f32 ? t.contiguous() : t.to(DType::f32).contiguous();
  };
  // A gradient from the wire in the dtype and on the device of the output it belongs to.
  auto wire_to = [](const Tensor& grad, const Tensor& out) {
    NoGradGuard ng;
    Tensor g = grad.to(out.device());
    return g.dtype() == out.dtype() ? g : g.to(out.dtype());
  };
  auto as_input = [](Tensor t) {
    t.set_requires_grad(true);
    return t;
  };

  MemoryCategoryScope activations(MemoryCategory::activations);
  std::deque<InFlight> in_flight;
  int64_t forwards = 0, backwards = 0;
  double loss_sum = 0;
  // The next micro-batch's input: the batch's rows on the first stage; otherwise it comes from the previous stage.
  auto recv_forward = [&]() {
    if (layout_.first()) return slice_of(x, forwards);
    Tensor in = activation(forwards);
    world_.recv(in, prev);
    return as_input(in);
  };
  auto forward = [&](const Tensor& in) {
    const int64_t i = forwards++;
    InFlight f{in, work.forward(in, slice_of(y, i)), double(rows(i)) / double(B)};
    in_flight.push_back(f);
    return f.out;
  };
  // Backward of the oldest micro-batch in flight, from `grad` (the next stage's gradient of its output).
  auto backward = [&](const Tensor& grad) {
    InFlight f = in_flight.front();
    in_flight.pop_front();
    if (++backwards == M && work.before_last_backward) work.before_last_backward();
    if (layout_.last()) {
      Tensor weighted = f.weight == 1 ? f.out : mul_scalar(f.out, f.weight);
      loss_sum += f.out.item() * f.weight;
      work.backward_loss(weighted);
    } else {
      f.out.backward(wire_to(grad, f.out));
    }
    return layout_.first() ? Tensor() : wire(f.in.grad());
  };

  // PipeDream-Flush: warm up with forwards, then one forward and one
  // backward at a time, then drain. The steady state pairs each send with
  // the matching receive (send_recv), so neighbours never both wait to send.
  const int64_t warmup = std::min<int64_t>(S - s - 1, M), steady = M - warmup;
  for (int64_t k = 0; k < warmup; ++k) {
    Tensor out = forward(recv_forward());
    world_.send(wire(out), next);
  }
  Tensor in = steady > 0 ? recv_forward() : Tensor();
  for (int64_t k = 0; k < steady; ++k) {
    Tensor out = forward(in), grad;
    if (!layout_.last()) {
      grad = activation(backwards);
      world_.send_recv(wire(out), next, grad, next);
    }
    Tensor grad_in = backward(grad);
    const bool more = k + 1 < steady;
    if (layout_.first()) {
      if (more) in = recv_forward();
    } else if (more) {
      in = activation(forwards);
      world_.send_recv(grad_in, prev, in, prev);
      in = as_input(in);
    } else {
      world_.send(grad_in, prev);
    }
  }
  for (int64_t k = 0; k < warmup; ++k) {
    Tensor grad = activation(backwards);
    world_.recv(grad, next);
    Tensor grad_in = backward(grad);
    if (!layout_.first()) world_.send(grad_in, prev);
  }
  return loss_sum;
}

void Pipeline::sum_tied_gradients(const std::vector<Tensor>& grads) {
  if (layout_.stages == 1 || !(layout_.first() || layout_.last())) return;
  const int other = layout_.rank_of(layout_.replica, layout_.first() ? layout_.stages - 1 : 0);
  for (Tensor g : grads) {
    Tensor mine = g.contiguous().clone(), theirs = Tensor::empty(g.shape(), g.dtype(), g.device());
    world_.send_recv(mine, other, theirs, other);
    backend_for(g).binary(BinaryOp::add, mine, theirs, g);  // a + b on one end, b + a on the other: the same bits
  }
}

}  // namespace kiln::distributed
