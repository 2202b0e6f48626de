#include "kiln/nn/attention.h"

#include <cmath>

namespace kiln::nn {

CausalSelfAttention::CausalSelfAttention(int64_t n_embd, int64_t n_head, double p, Generator& init,
                                         std::shared_ptr<Generator> dropout_gen)
    : n_embd_(n_embd), n_head_(n_head) {
  KILN_CHECK(n_head > 0 && n_embd % n_head == 0, "attention: n_embd (", n_embd, ") must be divisible by n_head (",
             n_head, ")");
  c_attn = register_module("c_attn", std::make_shared<Linear>(n_embd, 3 * n_embd, init));
  c_proj = register_module("c_proj", std::make_shared<Linear>(n_embd, n_embd, init));
  resid_dropout_ = register_module("resid_dropout", std::make_shared<Dropout>(p, std::move(dropout_gen)));
}

Tensor CausalSelfAttention::forward(const Tensor& x) { return forward(x, {}); }

Tensor CausalSelfAttention::forward(const Tensor& x, std::function<Tensor()> recompute_x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head_;
  KILN_CHECK(C == n_embd_, "attention: input has ", C, " features, expected ", n_embd_);
  const bool selective = bool(recompute_x);
  Tensor projected = selective ? linear_recomputing_input(x, c_attn->weight, c_attn->bias, std::move(recompute_x))
                               : c_attn->forward(x);
  Tensor heads = scaled_dot_product_attention_packed(projected, H, /*causal=*/true);  // [B, H, T, D]
  Tensor y = reshape(transpose(heads, 1, 2), {B, T, C});
  if (!selective) return resid_dropout_->forward(c_proj->forward(y));
  // The attention node keeps `heads`; merging them again is a view.
  auto merge_again = [heads = heads.detach(), B, T, C] { return reshape(transpose(heads, 1, 2), {B, T, C}); };
  return resid_dropout_->forward(linear_recomputing_input(y, c_proj->weight, c_proj->bias, merge_again));
}

Tensor CausalSelfAttention::forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t past) {
  const int64_t n = x.size(1), C = x.size(2), H = n_head_, D = C / H;
  KILN_CHECK(x.size(0) == 1 && C == n_embd_ && past + n <= k_cache.size(2), "attention cache: ", past, " + ", n,
             " positions do not fit its ", k_cache.size(2));
  KILN_CHECK(past == 0 || n == 1, "attention cache: after the prompt, one position at a time");
  if (past == 0) return forward_prompts(x, {&k_cache}, {&v_cache}, {n});  // the prompt: as in training
  NoGradGuard ng;
  // One new position: it may attend to every cached one, so no mask.
  Tensor qkv = permute(reshape(c_attn->forward(x), {1, n, 3, H, D}), {2, 0, 3, 1, 4});
  Tensor q = squeeze(slice(qkv, 0, 0, 1), 0), k = squeeze(slice(qkv, 0, 1, 2), 0), v = squeeze(slice(qkv, 0, 2, 3), 0);
  Tensor k_slot = slice(k_cache, 2, past, past + n), v_slot = slice(v_cache, 2, past, past + n);
  copy_into(k, k_slot);
  copy_into(v, v_slot);
  Tensor keys = slice(k_cache, 2, 0, past + 1), values = slice(v_cache, 2, 0, past + 1);
  Tensor scores = mul_scalar(matmul(q, transpose(keys, 2, 3)), 1.0 / std::sqrt(double(D)));
  Tensor heads = matmul(softmax(scores, -1), values);
  return c_proj->forward(reshape(transpose(heads, 1, 2), {1, n, C}));
}

Tensor CausalSelfAttention::forward_prompts(const Tensor& x, const std::vector<Tensor*>& k_caches,
                                            const std::vector<Tensor*>& v_caches, const std::vector<int64_t>& lengths) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head_, D = C / H;
  KILN_CHECK(x.dim() == 3 && C == n_embd_ && size_t(B) == k_caches.size() && size_t(B) == v_caches.size() &&
                 size_t(B) == lengths.size(),
             "attention prompts: x must be [B, T, ", n_embd_, "] with a cache and a length per row, got ",
             shape_str(x.shape()));
  NoGradGuard ng;
  Tensor qkv = permute(reshape(c_attn->forward(x), {B, T, 3, H, D}), {2, 0, 3, 1, 4});  // [3, B, H, T, D]
  Tensor q = squeeze(slice(qkv, 0, 0, 1), 0), k = squeeze(slice(qkv, 0, 1, 2), 0), v = squeeze(slice(qkv, 0, 2, 3), 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lengths[size_t(b)];
    KILN_CHECK(n >= 1 && n <= T && n <= k_caches[size_t(b)]->size(2), "attention prompts: row ", b, " has ", n,
               " positions; the rows hold ", T, " and its cache ", k_caches[size_t(b)]->size(2));
    Tensor k_rows = slice(*k_caches[size_t(b)], 2, 0, n), v_rows = slice(*v_caches[size_t(b)], 2, 0, n);
    copy_into(slice(slice(k, 0, b, b + 1), 2, 0, n), k_rows);
    copy_into(slice(slice(v, 0, b, b + 1), 2, 0, n), v_rows);
  }
  Tensor heads = scaled_dot_product_attention(q, k, v, /*causal=*/true);
  return c_proj->forward(reshape(transpose(heads, 1, 2), {B, T, C}));
}

Tensor CausalSelfAttention::forward_decode(const Tensor& x, const std::vector<Tensor*>& k_caches,
                                           const std::vector<Tensor*>& v_caches, const std::vector<int64_t>& pasts) {
  const int64_t B = x.size(0), C = x.size(2), H = n_head_, D = C / H;
  KILN_CHECK(x.dim() == 3 && x.size(1) == 1 && C == n_embd_ && size_t(B) == k_caches.size() &&
                 size_t(B) == v_caches.size() && size_t(B) == pasts.size(),
             "attention decode: x must be [B, 1, ", n_embd_, "] with a cache and a past per row, got ",
             shape_str(x.shape()));
  NoGradGuard ng;
  Tensor qkv = permute(reshape(c_attn->forward(x), {B, 1, 3, H, D}), {2, 0, 3, 1, 4});  // [3, B, H, 1, D]
  Tensor q = squeeze(slice(qkv, 0, 0, 1), 0), k = squeeze(slice(qkv, 0, 1, 2), 0), v = squeeze(slice(qkv, 0, 2, 3), 0);
  Tensor heads = Tensor::empty({B, H, 1, D}, x.dtype(), x.device());
  for (int64_t b = 0; b < B; ++b) {
    Tensor& k_cache = *k_caches[size_t(b)];
    Tensor& v_cache = *v_caches[size_t(b)];
    const int64_t past = pasts[size_t(b)];
    KILN_CHECK(past >= 0 && past < k_cache.size(2), "attention decode: position ", past, " does not fit the cache's ",
               k_cache.size(2));
    Tensor k_slot = slice(k_cache, 2, past, past + 1), v_slot = slice(v_cache, 2, past, past + 1);
    copy_into(slice(k, 0, b, b + 1), k_slot);
    copy_into(slice(v, 0, b, b + 1), v_slot);
    Tensor keys = slice(k_cache, 2, 0, past + 1), values = slice(v_cache, 2, 0, past + 1);
    Tensor scores = mul_scalar(matmul(slice(q, 0, b, b + 1), transpose(keys, 2, 3)), 1.0 / std::sqrt(double(D)));
    Tensor row = slice(heads, 0, b, b + 1);
    copy_into(matmul(softmax(scores, -1), values), row);
  }
  return c_proj->forward(reshape(transpose(heads, 1, 2), {B, 1, C}));
}

}  // namespace kiln::nn
