#include "models/llama/moe.h"

#include <algorithm>
#include <numeric>

#include "kiln/autograd/grad_mode.h"
#include "kiln/core/error.h"

namespace kiln::models {

using namespace kiln::nn;

namespace {

bool on_meta(const Tensor& t) { return t.device().type == DeviceType::meta; }

// Row `rows` of a table [N, C], as a differentiable gather (embedding's backward scatters into the table).
Tensor gather_rows(const Tensor& table, const std::vector<int64_t>& rows) {
  return embedding(table, Tensor::from_vector(rows, {int64_t(rows.size())}).to(table.device()));
}

// probs [N, E] on the host -> each row's top k expert ids, best first (ties: the lower id, as torch.topk), into out.
void top_k_of(const float* probs, int64_t N, int64_t E, int64_t k, std::vector<int64_t>& out) {
  thread_local std::vector<int64_t> order;
  out.resize(size_t(N * k));
  order.resize(size_t(E));
  for (int64_t n = 0; n < N; ++n) {
    const float* p = probs + n * E;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    std::copy(order.begin(), order.begin() + k, out.begin() + n * k);
  }
}

// A forward's routing lists, kept per thread: a decoding step reuses their
// capacity and takes nothing from the heap once warm.
struct Routing {
  std::vector<int64_t> chosen, at, position;
  std::vector<std::vector<int64_t>> tokens, slots;  // per expert: its tokens, and their slots (token * k + j)
  std::vector<Tensor> outputs;
};

}  // namespace

MixtureOfExperts::MixtureOfExperts(const MoeShape& s, Generator& init) : shape_(s) {
  KILN_CHECK(s.experts > 0 && s.top_k > 0 && s.top_k <= s.experts, "mixture of experts: ", s.top_k,
             " experts per token of ", s.experts);
  gate = register_module("gate", std::make_shared<Linear>(s.hidden, s.experts, init, false));
  auto experts = register_module("experts", std::make_shared<Named>());
  for (int64_t e = 0; e < s.experts; ++e) {
    auto expert = experts->add(std::to_string(e), std::make_shared<Named>());
    experts_.push_back({expert->add("gate_proj", std::make_shared<Linear>(s.hidden, s.intermediate, init, false)),
                        expert->add("up_proj", std::make_shared<Linear>(s.hidden, s.intermediate, init, false)),
                        expert->add("down_proj", std::make_shared<Linear>(s.intermediate, s.hidden, init, false))});
  }
}

void MixtureOfExperts::route(const Tensor& probs, std::vector<int64_t>& chosen) const {
  const int64_t N = probs.size(0), E = shape_.experts, k = shape_.top_k;
  if (!on_meta(probs)) {
    const Tensor host = probs.to(Device::cpu()).contiguous();
    return top_k_of(host.data<float>(), N, E, k, chosen);
  }
  chosen.resize(size_t(N * k));  // the planner's: the same rows per pass, any experts
  for (int64_t i = 0; i < N * k; ++i) chosen[size_t(i)] = i % E;
}

Tensor MixtureOfExperts::forward(const Tensor& x) {
  const int64_t C = shape_.hidden, k = shape_.top_k, E = shape_.experts;
  const Tensor rows = reshape(x, {-1, C});
  const int64_t N = rows.size(0);
  const Tensor logits = gate->forward(rows);  // [N, E]
  if (keep_router_logits) router_logits_ = logits;
  const Tensor probs = softmax(logits.dtype() == DType::f32 ? logits : to_dtype(logits, DType::f32), -1);
  thread_local Routing r;
  route(probs, r.chosen);
  if (N == 1 && !grad_enabled() && rows.dtype() == DType::f32 && rows.device().type == DeviceType::cpu)
    return reshape(one_token(rows, probs, r.chosen), x.shape());
  // The chosen probabilities [N, k], gathered from probs seen as a column [N * E, 1].
  r.at.resize(r.chosen.size());
  for (int64_t i = 0; i < N * k; ++i) r.at[size_t(i)] = (i / k) * E + r.chosen[size_t(i)];
  Tensor weights = reshape(gather_rows(reshape(probs, {N * E, 1}), r.at), {N, k});
  if (shape_.normalize_top_k) weights = weights / sum(weights, {-1}, true);
  if (weights.dtype() != x.dtype()) weights = to_dtype(weights, x.dtype());
  // Each expert once, on its tokens (slots in expert order), then every slot back in token order.
  r.tokens.resize(size_t(E));
  r.slots.resize(size_t(E));
  for (int64_t e = 0; e < E; ++e) {  // room for every token at once: routing differs step to step
    r.tokens[size_t(e)].clear(), r.tokens[size_t(e)].reserve(size_t(N));
    r.slots[size_t(e)].clear(), r.slots[size_t(e)].reserve(size_t(N));
  }
  for (int64_t i = 0; i < N * k; ++i) {
    r.tokens[size_t(r.chosen[size_t(i)])].push_back(i / k);
    r.slots[size_t(r.chosen[size_t(i)])].push_back(i);
  }
  r.position.resize(size_t(N * k));
  r.outputs.clear();  // (a forward that threw may have left some)
  r.outputs.reserve(size_t(E));
  int64_t done = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (r.tokens[size_t(e)].empty()) continue;
    const Expert& ex = experts_[size_t(e)];
    const Tensor in = gather_rows(rows, r.tokens[size_t(e)]);
    r.outputs.push_back(ex.down_proj->forward(silu_mul(ex.gate_proj->forward(in), ex.up_proj->forward(in))));
    for (int64_t slot : r.slots[size_t(e)]) r.position[size_t(slot)] = done++;
  }
  const Tensor expert_rows = cat(r.outputs, 0);
  r.outputs.clear();  // keeps the capacity, not the tensors
  const Tensor per_slot = reshape(gather_rows(expert_rows, r.position), {N, k, C});
  Shape shape = x.shape();
  return reshape(sum(per_slot * reshape(weights, {N, k, 1}), {1}), shape);
}

// What forward's general path computes for one token, in its bits (its
// weights' normalising sum and the weighted sum over experts accumulate in
// double, as the reduction op does), without its gathers, concatenation and
// scatter: a decoding step runs ~10 fewer ops a layer, each a few
// microseconds of the step's host time.
Tensor MixtureOfExperts::one_token(const Tensor& row, const Tensor& probs, const std::vector<int64_t>& chosen) {
  const int64_t C = shape_.hidden, k = shape_.top_k;
  const float* p = probs.data<float>();
  thread_local std::vector<float> weights;
  weights.resize(size_t(k));
  double total = 0;
  for (int64_t j = 0; j < k; ++j) total += weights[size_t(j)] = p[chosen[size_t(j)]];
  if (shape_.normalize_top_k)
    for (float& w : weights) w /= float(total);
  Tensor out = Tensor::empty({1, C}, DType::f32);
  thread_local std::vector<double> sums;
  sums.assign(size_t(C), 0.0);
  for (int64_t j = 0; j < k; ++j) {
    const Expert& ex = experts_[size_t(chosen[size_t(j)])];
    const Tensor y = ex.down_proj->forward(silu_mul(ex.gate_proj->forward(row), ex.up_proj->forward(row))).contiguous();
    const float* v = y.data<float>();
    const float w = weights[size_t(j)];
    for (int64_t c = 0; c < C; ++c) {
      const float product = v[c] * w;  // rounded to f32, as the general path's product is
      sums[size_t(c)] += product;
    }
  }
  float* o = out.data<float>();
  for (int64_t c = 0; c < C; ++c) o[c] = float(sums[size_t(c)]);
  return out;
}

Tensor MixtureOfExperts::take_router_logits() {
  Tensor out = router_logits_;
  router_logits_ = Tensor();
  return out;
}

Tensor load_balancing_loss(const std::vector<Tensor>& router_logits, int64_t experts, int64_t top_k) {
  KILN_CHECK(!router_logits.empty(), "load balancing: no router logits");
  std::vector<float> picks(size_t(experts), 0.0f);
  Tensor prob_sum;
  int64_t rows = 0;
  for (const Tensor& logits : router_logits) {
    const Tensor probs = softmax(logits.dtype() == DType::f32 ? logits : to_dtype(logits, DType::f32), -1);
    const int64_t N = probs.size(0);
    if (!on_meta(probs)) {
      std::vector<int64_t> chosen;
      top_k_of(probs.detach().to(Device::cpu()).contiguous().data<float>(), N, experts, top_k, chosen);
      for (int64_t e : chosen) picks[size_t(e)] += 1;
    }
    const Tensor layer_sum = sum(probs, {0});
    prob_sum = prob_sum.defined() ? prob_sum + layer_sum : layer_sum;
    rows += N;
  }
  const Tensor share = Tensor::from_vector(picks, {experts}).to(prob_sum.device());
  return mul_scalar(sum(share * prob_sum), double(experts) / (double(rows) * double(rows)));
}

}  // namespace kiln::models
