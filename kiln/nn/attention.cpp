#include "kiln/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/backend/batch_invariant.h"
#include "kiln/backend/factory.h"

namespace kiln::nn {

Tensor causal_bias(int64_t T, int64_t window, Device device) {
  std::vector<float> bias(size_t(T * T), 0.0f);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      if (j > i || (window > 0 && j <= i - window)) bias[size_t(i * T + j)] = -std::numeric_limits<float>::infinity();
  return Tensor::from_vector(bias, {T, T}).to(device);
}

namespace {
constexpr float kBlocked = -1e30f;
}

Tensor key_padding_bias(const std::vector<int64_t>& lengths, int64_t T, Device device) {
  if (std::all_of(lengths.begin(), lengths.end(), [T](int64_t n) { return n >= T; })) return {};
  const int64_t B = int64_t(lengths.size());
  std::vector<float> bias(size_t(B * T), 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = std::max<int64_t>(lengths[size_t(b)], 0); t < T; ++t) bias[size_t(b * T + t)] = kBlocked;
  return Tensor::from_vector(bias, {B, 1, 1, T}).to(device);
}

Tensor symmetric_window_bias(int64_t T, int64_t half_window, Device device) {
  if (T - 1 <= half_window) return {};
  std::vector<float> bias(size_t(T * T), 0.0f);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      if (std::abs(i - j) > half_window) bias[size_t(i * T + j)] = kBlocked;
  return Tensor::from_vector(bias, {T, T}).to(device);
}

Tensor add_biases(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  return b.defined() ? a + b : a;
}

Tensor attention_written_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                             Dropout* probs_dropout, double softcap) {
  // 1/sqrt(D) on whichever is smaller, q [.., T, D] or the scores [.., T, S]: a pass over D values a row, not S.
  const double scale = 1.0 / std::sqrt(double(q.size(3)));
  Tensor scores = k.size(2) > q.size(3) ? matmul(q * scale, transpose(k, 2, 3)) : matmul(q, transpose(k, 2, 3)) * scale;
  if (softcap > 0) scores = mul_scalar(tanh(mul_scalar(scores, 1.0 / softcap)), softcap);
  if (scores.dtype() != DType::f32) scores = to_dtype(scores, DType::f32);  // bf16 scores: softmax in f32
  if (bias.defined()) scores = scores + (bias.dtype() == DType::f32 ? bias : to_dtype(bias, DType::f32));
  Tensor probs = softmax(scores, -1);
  if (probs_dropout) probs = probs_dropout->forward(probs);
  return matmul(probs.dtype() == v.dtype() ? probs : to_dtype(probs, v.dtype()), v);
}

CausalSelfAttention::CausalSelfAttention(int64_t n_embd, int64_t n_head, double p, Generator& init,
                                         std::shared_ptr<Generator> dropout_gen, double attention_dropout)
    : n_embd_(n_embd), n_head_(n_head) {
  KILN_CHECK(n_head > 0 && n_embd % n_head == 0, "attention: n_embd (", n_embd, ") must be divisible by n_head (",
             n_head, ")");
  c_attn = register_module("c_attn", std::make_shared<Linear>(n_embd, 3 * n_embd, init));
  c_proj = register_module("c_proj", std::make_shared<Linear>(n_embd, n_embd, init));
  resid_dropout_ = register_module("resid_dropout", std::make_shared<Dropout>(p, dropout_gen));
  attn_dropout_ = register_module("attn_dropout", std::make_shared<Dropout>(attention_dropout, std::move(dropout_gen)));
}

Tensor attention_by_rows(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& lengths,
                         bool causal) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3);
  KILN_CHECK(int64_t(lengths.size()) == B, "attention: ", lengths.size(), " lengths for ", B, " rows");
  NoGradGuard ng;
  std::vector<int32_t> tables(static_cast<size_t>(B)), spans;
  for (int64_t b = 0; b < B; ++b) {
    tables[size_t(b)] = int32_t(b);
    for (int64_t t = 0; t < T; ++t)
      spans.insert(spans.end(), {int32_t(b), 0, int32_t(causal ? t + 1 : lengths[size_t(b)])});
  }
  const Device device = q.device();
  // Each sequence one page: keys [Hkv, D, T], values [Hkv, T, D].
  Tensor out = paged_attention(reshape(contiguous(q), {B * T, H, D}), contiguous(permute(k, {0, 2, 3, 1})),
                               contiguous(transpose(v, 1, 2)),
                               Tensor::from_vector(tables, {B, 1}).to(device),
                               Tensor::from_vector(spans, {B * T, 3}).to(device), 1.0 / std::sqrt(double(D)));
  return reshape(out, {B, T, H * D});
}

Tensor CausalSelfAttention::forward(const Tensor& x) { return forward(x, {}); }

Tensor CausalSelfAttention::forward(const Tensor& x, std::function<Tensor()> recompute_x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head_;
  KILN_CHECK(C == n_embd_, "attention: input has ", C, " features, expected ", n_embd_);
  if (batch_invariant() && !grad_enabled()) {
    Tensor parts = reshape(c_attn->forward(x), {B, T, 3, H, C / H});
    auto part = [&](int64_t i) { return squeeze(slice(parts, 2, i, i + 1), 2); };
    Tensor y = attention_by_rows(part(0), part(1), part(2), std::vector<int64_t>(size_t(B), T), /*causal=*/true);
    return resid_dropout_->forward(c_proj->forward(to_dtype(y, x.dtype())));
  }
  // Selective recomputation works on the bare weights; a LoRA adapter runs through forward.
  const bool selective = recompute_x && !c_attn->lora_A && !c_proj->lora_A;
  Tensor projected = selective ? linear_recomputing_input(x, c_attn->weight, c_attn->bias, std::move(recompute_x))
                               : c_attn->forward(x);
  Tensor heads;  // [B, H, T, D]
  if (is_training() && attn_dropout_->p() > 0) {
    Tensor qkv = permute(reshape(projected, {B, T, 3, H, C / H}), {2, 0, 3, 1, 4});  // [3, B, H, T, D]
    auto part = [&](int64_t i) { return squeeze(slice(qkv, 0, i, i + 1), 0); };
    heads = attention_written_out(part(0), part(1), part(2), causal_bias(T, 0, x.device()), attn_dropout_.get());
  } else {
    heads = scaled_dot_product_attention_packed(projected, H, /*causal=*/true);
  }
  Tensor y = reshape(transpose(heads, 1, 2), {B, T, C});
  if (!selective) return resid_dropout_->forward(c_proj->forward(y));
  // The attention node keeps `heads`; merging them again is a view.
  auto merge_again = [heads = heads.detach(), B, T, C] { return reshape(transpose(heads, 1, 2), {B, T, C}); };
  return resid_dropout_->forward(linear_recomputing_input(y, c_proj->weight, c_proj->bias, merge_again));
}

Tensor CausalSelfAttention::forward_paged(const Tensor& x, const PagedStep& step, int64_t layer, const RealRows& real,
                                          bool read_pages) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head_, D = C / H;
  KILN_CHECK(x.dim() == 3 && C == n_embd_, "attention: x must be [B, T, ", n_embd_, "], got ", shape_str(x.shape()));
  NoGradGuard ng;
  Tensor projected = c_attn->forward(x);  // [B, T, 3C]
  const Tensor packed = real.take(reshape(projected, {B * T, 3 * C}));
  auto part = [&](int64_t i) { return reshape(slice(packed, 1, i * C, (i + 1) * C), {packed.size(0), H, D}); };
  write_paged(step, layer, part(1), part(2));
  Tensor y;
  if (read_pages) {
    Tensor out = reshape(read_paged(step, layer, part(0), 1.0 / std::sqrt(double(D))), {packed.size(0), C});
    if (out.dtype() != projected.dtype()) out = to_dtype(out, projected.dtype());
    y = reshape(real.put(out), {B, T, C});
  } else {
    Tensor qkv = permute(reshape(projected, {B, T, 3, H, D}), {2, 0, 3, 1, 4});  // [3, B, H, T, D]
    Tensor q = squeeze(slice(qkv, 0, 0, 1), 0), k = squeeze(slice(qkv, 0, 1, 2), 0), v = squeeze(slice(qkv, 0, 2, 3), 0);
    y = reshape(transpose(scaled_dot_product_attention(q, k, v, /*causal=*/true), 1, 2), {B, T, C});
  }
  return c_proj->forward(y);
}

}  // namespace kiln::nn
