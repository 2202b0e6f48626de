#include "models/llama/llama.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/autograd/checkpoint.h"
#include "kiln/backend/batch_invariant.h"
#include "kiln/backend/factory.h"

namespace kiln::models {

using namespace kiln::nn;

namespace {

class RmsNorm : public Module {
 public:
  // plus_one: Gemma's, whose weight starts at 0 and scales by 1 + w.
  RmsNorm(int64_t dim, double eps, bool plus_one)
      : eps_(eps), plus_one_(plus_one) {
    weight = register_parameter("weight", plus_one ? zeros({dim}) : ones({dim}));
  }
  // x / sqrt(mean(x^2) + eps) * weight, in f32 as transformers computes it:
  // Llama casts before the product, Gemma after it.
  Tensor forward(const Tensor& x) override {
    if (x.dtype() == weight.dtype()) return rms_norm(x, weight, eps_, plus_one_);
    // Autocast's activations beside f32 weights: the same steps, op by op.
    Tensor x32 = x.dtype() == DType::f32 ? x : to_dtype(x, DType::f32);
    Tensor normed = x32 / sqrt(add_scalar(mean(square(x32), {-1}, true), eps_));
    if (plus_one_) {
      const Tensor scaled = normed * add_scalar(weight.dtype() == DType::f32 ? weight : to_dtype(weight, DType::f32), 1);
      return x.dtype() == DType::f32 ? scaled : to_dtype(scaled, x.dtype());
    }
    if (weight.dtype() != DType::f32) normed = to_dtype(normed, weight.dtype());
    return normed * weight;
  }
  Tensor weight;

 private:
  double eps_;
  bool plus_one_;
};

Tensor silu(const Tensor& x) { return x * sigmoid(x); }

std::shared_ptr<RmsNorm> rms_norm(int64_t dim, const LlamaConfig& c) {
  return std::make_shared<RmsNorm>(dim, c.rms_norm_eps, c.norm_plus_one);
}

// [B, kv heads, S, D] -> [B, kv heads * repeats, S, D]: each kv head serves `repeats` query heads.
Tensor repeat_kv(const Tensor& x, int64_t repeats) {
  if (repeats == 1) return x;
  const int64_t B = x.size(0), Hkv = x.size(1), S = x.size(2), D = x.size(3);
  return reshape(expand(unsqueeze(x, 2), {B, Hkv, repeats, S, D}), {B, Hkv * repeats, S, D});
}

}  // namespace

// One decoder layer, with transformers' names.
class LlamaLayer : public Module {
 public:
  LlamaLayer(const LlamaConfig& c, int64_t index, Generator& init, const std::shared_ptr<Generator>& dropout_gen)
      : c_(c),
        rotates_(c.rope_layers.empty() || c.rope_layers[size_t(index)]),
        window_(c.slides(index) ? c.sliding_window : 0),
        local_(window_ > 0 && !c.sliding_layers.empty()) {
    auto attn = register_module("self_attn", std::make_shared<Named>());
    const bool qkv_bias = c.attention_bias || c.qkv_bias;
    const int64_t q_width = c.num_heads * c.head_dim, kv_width = c.num_kv_heads * c.head_dim;
    if (c.fused_projections) {
      qkv_proj = attn->add("qkv_proj", std::make_shared<Linear>(c.hidden_size, q_width + 2 * kv_width, init, qkv_bias));
    } else {
      q_proj = attn->add("q_proj", std::make_shared<Linear>(c.hidden_size, q_width, init, qkv_bias));
      k_proj = attn->add("k_proj", std::make_shared<Linear>(c.hidden_size, kv_width, init, qkv_bias));
      v_proj = attn->add("v_proj", std::make_shared<Linear>(c.hidden_size, kv_width, init, qkv_bias));
    }
    o_proj = attn->add("o_proj", std::make_shared<Linear>(q_width, c.hidden_size, init, c.attention_bias));
    if (c.is_moe(index)) {
      const MoeShape shape{c.hidden_size, c.expert_intermediate_size, c.num_experts, c.experts_per_token,
                           c.normalize_top_k};
      moe = register_module("mlp", std::make_shared<MixtureOfExperts>(shape, init));
    } else {
      auto mlp = register_module("mlp", std::make_shared<Named>());
      const int64_t H = c.hidden_size, I = c.intermediate_size;
      if (c.fused_projections) {
        gate_up_proj = mlp->add("gate_up_proj", std::make_shared<Linear>(H, 2 * I, init, c.mlp_bias));
      } else {
        gate_proj = mlp->add("gate_proj", std::make_shared<Linear>(H, I, init, c.mlp_bias));
        up_proj = mlp->add("up_proj", std::make_shared<Linear>(H, I, init, c.mlp_bias));
      }
      down_proj = mlp->add("down_proj", std::make_shared<Linear>(I, H, init, c.mlp_bias));
    }
    if (c.residual_dropout > 0)
      residual_dropout = register_module("resid_dropout", std::make_shared<Dropout>(c.residual_dropout, dropout_gen));
    if (c.qk_norm != LlamaConfig::QkNorm::none) {
      const bool whole = c.qk_norm == LlamaConfig::QkNorm::whole;
      q_norm = attn->add("q_norm", rms_norm(whole ? q_width : c.head_dim, c));
      k_norm = attn->add("k_norm", rms_norm(whole ? kv_width : c.head_dim, c));
    }
    if (c.norm_before) input_layernorm = register_module("input_layernorm", rms_norm(c.hidden_size, c));
    post_attention_layernorm = register_module("post_attention_layernorm", rms_norm(c.hidden_size, c));
    if (c.norm_before && c.norm_after)
      pre_feedforward_layernorm = register_module("pre_feedforward_layernorm", rms_norm(c.hidden_size, c));
    if (c.norm_after)
      post_feedforward_layernorm = register_module("post_feedforward_layernorm", rms_norm(c.hidden_size, c));
    attention_dropout = register_module("attention_dropout", std::make_shared<Dropout>(c.attention_dropout, dropout_gen));
  }

  // x [B, T, C] at the positions cos and sin rotate by. With a paged step,
  // its keys and values (those of `real`'s rows, when rows are padded) go
  // into the pages, and with read_pages attention reads them all (a cache
  // holding earlier positions, or batch-invariant mode); otherwise it runs
  // causally on this pass's keys alone.
  // `masks`: a bidirectional model's (every token sees every other).
  Tensor forward_at(const Tensor& x, const Llama::Rotation& rotation, const nn::PagedStep* step, int64_t layer,
                    bool read_pages, const nn::RealRows* real = nullptr,
                    const Llama::BidirectionalMasks* masks = nullptr) {
    const bool local_rotation = local_ && c_.local_rope_theta > 0;  // Gemma 3's sliding layers
    const Tensor& cos = local_rotation ? rotation.local_cos : rotation.cos;
    const Tensor& sin = local_rotation ? rotation.local_sin : rotation.sin;
    if (c_.norm_after) {  // OLMo 2 (no norms before), Gemma 2 and 3 (both)
      const Tensor in = input_layernorm ? input_layernorm->forward(x) : x;
      const Tensor h =
          x + post_attention_layernorm->forward(attention(in, cos, sin, step, layer, read_pages, real, masks));
      return h + post_feedforward_layernorm->forward(mlp(pre_feedforward_layernorm ? pre_feedforward_layernorm->forward(h) : h));
    }
    const Tensor h =
        x + residual(attention(input_layernorm->forward(x), cos, sin, step, layer, read_pages, real, masks));
    return h + residual(mlp(post_attention_layernorm->forward(h)));
  }

  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, qkv_proj, gate_up_proj;
  std::shared_ptr<Dropout> residual_dropout;  // Phi-3's, training only
  std::shared_ptr<RmsNorm> input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
      post_feedforward_layernorm, q_norm, k_norm;
  std::shared_ptr<Dropout> attention_dropout;  // on the probabilities, training only
  std::shared_ptr<MixtureOfExperts> moe;      // the MLP of a mixture-of-experts layer

 private:
  Tensor mlp(const Tensor& n) const {
    if (moe) return moe->forward(n);
    Tensor gate, up;
    if (c_.fused_projections) {
      const Tensor gate_up = gate_up_proj->forward(n);
      const int64_t I = c_.intermediate_size;
      gate = slice(gate_up, -1, 0, I), up = slice(gate_up, -1, I, 2 * I);
    } else {
      gate = gate_proj->forward(n), up = up_proj->forward(n);
    }
    // SwiGLU in one pass (three ops, the bits the same); Gemma's GeGLU op by op.
    if (c_.activation == LlamaConfig::Activation::silu) return down_proj->forward(silu_mul(gate, up));
    return down_proj->forward(gelu(gate) * up);
  }
  // A sub-layer's output as its residual add takes it (Granite scales it, Phi-3 drops some of it).
  Tensor residual(const Tensor& t) const {
    const Tensor scaled = c_.residual_multiplier == 1 ? t : mul_scalar(t, c_.residual_multiplier);
    return residual_dropout ? residual_dropout->forward(scaled) : scaled;
  }
  // Rotary embedding of the first cos.size(-1) dims of each head (all of them
  // unless partial_rotary_factor says fewer); the rest pass unrotated.
  // (transformers' x * cos + rotate_half(x) * sin in one pass: seven ops a
  // call were a sixth of a decoding step's.)
  static Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin) { return rotary(x, cos, sin); }

  Tensor heads(const Tensor& projected, int64_t B, int64_t T, int64_t H) const {
    return transpose(reshape(projected, {B, T, H, c_.head_dim}), 1, 2);  // [B, H, T, D]
  }

  // [B, H, T, D] -> [B * T, H, D]: a row per position, as the pages hold them.
  static Tensor rows(const Tensor& heads) {
    return reshape(transpose(heads, 1, 2), {heads.size(0) * heads.size(2), heads.size(1), heads.size(3)});
  }

  Tensor attention(const Tensor& x, const Tensor& cos, const Tensor& sin, const nn::PagedStep* step, int64_t layer,
                   bool read_pages, const nn::RealRows* real, const Llama::BidirectionalMasks* masks) const {
    const int64_t B = x.size(0), T = x.size(1), H = c_.num_heads, Hkv = c_.num_kv_heads, D = c_.head_dim;
    Tensor q, k, v;
    if (c_.fused_projections) {
      const Tensor qkv = qkv_proj->forward(x);
      q = slice(qkv, -1, 0, H * D);
      k = slice(qkv, -1, H * D, (H + Hkv) * D);
      v = slice(qkv, -1, (H + Hkv) * D, (H + 2 * Hkv) * D);
    } else {
      q = q_proj->forward(x), k = k_proj->forward(x), v = v_proj->forward(x);
    }
    if (c_.qk_norm == LlamaConfig::QkNorm::whole) q = q_norm->forward(q), k = k_norm->forward(k);
    q = heads(q, B, T, H);
    k = heads(k, B, T, Hkv);
    if (c_.qk_norm == LlamaConfig::QkNorm::per_head) q = q_norm->forward(q), k = k_norm->forward(k);
    v = heads(v, B, T, Hkv);
    if (rotates_) {
      q = rotate(q, cos, sin);
      k = rotate(k, cos, sin);
    }
    // Granite's attention_multiplier replaces 1/sqrt(head_dim): the ratio goes into q.
    if (c_.attention_multiplier > 0) q = mul_scalar(q, c_.attention_multiplier * std::sqrt(double(D)));
    const double scale = 1.0 / std::sqrt(double(D));
    auto real_rows = [&](const Tensor& t) { return real ? real->take(rows(t)) : rows(t); };
    if (step) write_paged(*step, layer, real_rows(k), real_rows(v));
    if (read_pages) {
      const Tensor out = read_paged(*step, layer, real_rows(q), scale, local_, c_.attention_softcap);
      return o_proj->forward(reshape(real ? real->put(out) : out, {B, T, H * D}));
    }
    k = repeat_kv(k, H / Hkv);
    v = repeat_kv(v, H / Hkv);
    const bool windowed = window_ > 0 && T > window_;
    Tensor out;
    if (masks) {
      const Tensor& bias = window_ > 0 ? masks->sliding : masks->global;
      out = bias.defined() || c_.attention_softcap > 0
                ? attention_written_out(q, k, v, bias, attention_dropout.get(), c_.attention_softcap)
                : scaled_dot_product_attention(q, contiguous(k), contiguous(v), /*causal=*/false);
    } else if (!windowed && c_.attention_softcap == 0 && !(is_training() && attention_dropout->p() > 0)) {
      out = scaled_dot_product_attention(q, contiguous(k), contiguous(v), /*causal=*/true);
    } else {
      // Written out for the window (query i sees key j when j <= i and j > i - w, as
      // transformers' mask does), for capped scores or for dropout on the probabilities.
      out = attention_written_out(q, k, v, causal_bias(T, windowed ? window_ : 0, x.device()),
                                  attention_dropout.get(), c_.attention_softcap);
    }
    return o_proj->forward(reshape(transpose(out, 1, 2), {B, T, H * D}));
  }

  LlamaConfig c_;
  bool rotates_;    // SmolLM3's layers without rotary positions do not
  int64_t window_;  // a sliding layer's window; 0: global
  bool local_;      // a sliding layer among global ones: the local rotation and spans
};

class Llama::Decoder : public Module {
 public:
  Decoder(const LlamaConfig& c, Generator& init, const std::shared_ptr<Generator>& dropout_gen) {
    embed_tokens = register_module("embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, init));
    embed_tokens->padding_idx = c.pad_token_id;
    auto layers = register_module("layers", std::make_shared<Sequential>());
    for (int64_t i = 0; i < c.num_layers; ++i) {
      this->layers.push_back(std::make_shared<LlamaLayer>(c, i, init, dropout_gen));
      layers->add(this->layers.back());
    }
    norm = register_module("norm", rms_norm(c.hidden_size, c));
  }
  std::shared_ptr<Embedding> embed_tokens;
  std::vector<std::shared_ptr<LlamaLayer>> layers;
  std::shared_ptr<RmsNorm> norm;
};

Llama::Llama(const LlamaConfig& c, Generator& init) : config_(c) {
  KILN_CHECK(c.num_heads > 0 && c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0, "llama: ", c.num_heads,
             " attention heads cannot share ", c.num_kv_heads, " key/value heads evenly");
  KILN_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, "llama: rotary positions need an even head_dim, got ", c.head_dim);
  KILN_CHECK(c.rotated_dims() % 2 == 0 && c.rotated_dims() <= c.head_dim, "llama: ", c.rotated_dims(),
             " rotated dims of a ", c.head_dim, "-wide head");
  KILN_CHECK(c.rope_layers.empty() || int64_t(c.rope_layers.size()) == c.num_layers, "llama: ", c.rope_layers.size(),
             " layers say whether they rotate, for ", c.num_layers, " layers");
  KILN_CHECK(c.sliding_layers.empty() || int64_t(c.sliding_layers.size()) == c.num_layers, "llama: ",
             c.sliding_layers.size(), " layers say whether they slide, for ", c.num_layers, " layers");
  model_ = register_module("model", std::make_shared<Decoder>(c, init, dropout_gen_));
  if (!c.tie_word_embeddings)
    lm_head_ = register_module("lm_head", std::make_shared<Linear>(c.hidden_size, c.vocab_size, init, false));
}

// cos/sin of position * frequency for positions [0, n), each frequency twice
// (transformers' cat(freqs, freqs)), times the scaling's attention factor.
// Grown on demand: Llama 3's 131,072 positions would cost 128 MB up front.
int Llama::ensure_rope(int64_t n, Device device, int64_t seq_len, bool local) {
  const int v = local ? kLocalRope : rope_variant(config_.rope_scaling, seq_len);
  Tensor& cos_table = rope_cos_[v];
  if (cos_table.defined() && cos_table.size(0) >= n && cos_table.device() == device) return v;
  n = std::min(config_.max_positions, std::max<int64_t>({n, 256, cos_table.defined() ? 2 * cos_table.size(0) : 0}));
  const int64_t D = config_.rotated_dims();
  const RopeFrequencies f = local ? rope_frequencies(RopeScaling{}, config_.local_rope_theta, D, seq_len)
                                  : rope_frequencies(config_.rope_scaling, config_.rope_theta, D, seq_len);
  const float scaling = float(f.attention_scaling);
  std::vector<float> cos_v(size_t(n * D)), sin_v(cos_v.size());
  for (int64_t p = 0; p < n; ++p)
    for (int64_t i = 0; i < D; ++i) {
      const float angle = float(p) * f.inverse[size_t(i % (D / 2))];
      cos_v[size_t(p * D + i)] = std::cos(angle) * scaling;
      sin_v[size_t(p * D + i)] = std::sin(angle) * scaling;
    }
  cos_table = Tensor::from_vector(cos_v, {n, D}).to(device);
  rope_sin_[v] = Tensor::from_vector(sin_v, {n, D}).to(device);
  return v;
}

Tensor Llama::head_weight() const { return lm_head_ ? lm_head_->weight : model_->embed_tokens->weight; }

Tensor Llama::capped(const Tensor& logits) const {
  if (config_.final_softcap == 0) return logits;
  return mul_scalar(tanh(mul_scalar(logits, 1.0 / config_.final_softcap)), config_.final_softcap);
}

Tensor Llama::head_input(const Tensor& x) const {
  return config_.logits_scaling == 1 ? x : mul_scalar(x, 1.0 / config_.logits_scaling);
}

// Logits: the untied head, or the embedding read as one; either may be quantized.
Tensor Llama::head(const Tensor& x) const {
  return capped(nn::linear_or_quantized(head_input(x), head_weight(),
                                        lm_head_ ? lm_head_->quantized : model_->embed_tokens->quantized));
}

// The final norm's weight is never quantized: it says where and in what dtype the model runs.
const Tensor& Llama::anchor() const { return model_->norm->weight; }

Tensor Llama::hidden(const Tensor& ids, const Rotation& rotation, const nn::PagedStep* step, bool read_pages,
                     const nn::RealRows* real, const BidirectionalMasks* masks) {
  Tensor x = model_->embed_tokens->forward(ids);
  if (config_.embedding_multiplier != 1) {
    double multiplier = config_.embedding_multiplier;
    if (config_.round_embedding_multiplier && x.dtype() == DType::bf16)  // Gemma's normalizer, a tensor of x's dtype
      multiplier = bf16_to_float(float_to_bf16(float(multiplier)));
    if (config_.round_embedding_multiplier && x.dtype() == DType::f16)
      multiplier = f16_to_float(float_to_f16(float(multiplier)));
    x = mul_scalar(x, multiplier);
  }
  // In the stream's dtype, as transformers casts them: a bf16 model rotates in bf16.
  auto in_stream = [&](const Tensor& t) { return t.defined() ? to_dtype(t, x.dtype()) : t; };
  const Rotation r{in_stream(rotation.cos), in_stream(rotation.sin), in_stream(rotation.local_cos),
                   in_stream(rotation.local_sin)};
  for (size_t l = 0; l < model_->layers.size(); ++l) {
    auto& layer = model_->layers[l];
    if (!step && !masks && checkpointing_ == ActivationCheckpointing::blocks && grad_enabled())
      x = checkpoint([layer, r](const Tensor& in) { return layer->forward_at(in, r, nullptr, 0, false); }, x,
                     {dropout_gen_.get()});  // LoRA's dropout
    else
      x = layer->forward_at(x, r, step, int64_t(l), read_pages, real, masks);
  }
  return model_->norm->forward(x);
}

Llama::Rotation Llama::rope_rows(int64_t first, int64_t T, int64_t seq_len) {
  KILN_CHECK(first + T <= config_.max_positions, "the text holds ", first + T, " tokens, more than the model's ",
             config_.max_positions, " positions (max_position_embeddings); shorten it");
  auto rows = [&](const Tensor& table) { return slice(table, 0, first, first + T); };
  const int v = ensure_rope(first + T, anchor().device(), seq_len);
  Rotation r{rows(rope_cos_[v]), rows(rope_sin_[v]), {}, {}};
  if (config_.local_rope_theta > 0) {
    ensure_rope(first + T, anchor().device(), seq_len, /*local=*/true);
    r.local_cos = rows(rope_cos_[kLocalRope]), r.local_sin = rows(rope_sin_[kLocalRope]);
  }
  return r;
}

Tensor Llama::forward(const Tensor& ids) {
  check_causal("gives no next-token logits");
  return head(hidden_states(ids));
}

Tensor Llama::hidden_states(const Tensor& ids) { return padded_hidden_states(ids, {}); }

Tensor Llama::padded_hidden_states(const Tensor& ids, const std::vector<int64_t>& lengths) {
  const int64_t B = ids.size(0), T = ids.size(1);
  const Rotation rotation = rope_rows(0, T, T);
  if (!config_.bidirectional) return hidden(ids, rotation, nullptr, false);
  KILN_CHECK(lengths.empty() || int64_t(lengths.size()) == B, "llama: ", lengths.size(), " lengths for ", B, " rows");
  BidirectionalMasks masks;
  masks.global = nn::key_padding_bias(lengths, T, ids.device());
  // transformers' bidirectional window: |i - j| < sliding_window // 2 + 1 (llama.cpp's symmetric one the same).
  masks.sliding = nn::add_biases(masks.global, nn::symmetric_window_bias(T, config_.sliding_window / 2, ids.device()));
  return hidden(ids, rotation, nullptr, false, nullptr, &masks);
}

void Llama::check_causal(const char* what) const {
  KILN_CHECK(!config_.bidirectional,
             "this model attends both ways (use_bidirectional_attention: an embedding "
             "model such as EmbeddingGemma) and ",
             what, "; embed with it (kiln embed, /v1/embeddings)");
}

Tensor Llama::loss(const Tensor& ids, const Tensor& targets) {
  check_causal("has no next-token loss");
  std::vector<std::shared_ptr<MixtureOfExperts>> routers;
  if (config_.router_aux_loss_coef > 0 && grad_enabled()) {
    KILN_CHECK(checkpointing_ == ActivationCheckpointing::none, "the routers' load-balancing loss ",
               "(output_router_logits) is not implemented with activation checkpointing; train without it, or set "
               "output_router_logits false");
    for (const auto& layer : model_->layers)
      if (layer->moe) routers.push_back(layer->moe), layer->moe->keep_router_logits = true;
  }
  Tensor loss;
  if (config_.final_softcap == 0) {  // the fused loss never holds every position's logits
    loss = linear_cross_entropy(head_input(hidden_states(ids)), head_weight(), targets);
  } else {
    const Tensor logits = head(hidden_states(ids));  // in f32, as transformers' loss upcasts them
    loss = cross_entropy(reshape(logits.dtype() == DType::f32 ? logits : to_dtype(logits, DType::f32),
                                 {-1, config_.vocab_size}),
                         reshape(targets, {-1}));
  }
  if (routers.empty()) return loss;
  std::vector<Tensor> logits;
  for (const auto& router : routers) {
    router->keep_router_logits = false;
    logits.push_back(router->take_router_logits());
  }
  const Tensor aux = load_balancing_loss(logits, config_.num_experts, config_.experts_per_token);
  return loss + mul_scalar(aux, config_.router_aux_loss_coef);
}

void Llama::set_activation_checkpointing(ActivationCheckpointing mode) {
  KILN_CHECK(mode != ActivationCheckpointing::selective,
             "the Llama family checkpoints activations by blocks (or none), not selectively");
  checkpointing_ = mode;
}

// A prompt, or more of a sequence: a batch of one.
Tensor Llama::forward_cached(const Tensor& ids, KvCache& cache) {
  KILN_CHECK(ids.dim() == 2 && ids.size(0) == 1 && ids.size(1) >= 1, "llama: a cached forward takes ids [1, n], got ",
             shape_str(ids.shape()));
  if (const std::optional<int32_t> token = one_more_token(ids, cache, config_.vocab_size)) {
    KvCache* const one = &cache;
    return decode_step(std::span(&*token, 1), std::span(&one, 1));
  }
  return forward_prompts({ids.to(Device::cpu()).to_vector<int64_t>()}, {&cache});
}

bool Llama::crosses_rope_switch(int64_t past, int64_t more) const {
  const int64_t original = config_.rope_scaling.original_max_positions;
  return config_.rope_recompute_at_switch && past > 0 && past <= original && past + more > original;
}

Tensor Llama::forward_decode(const std::vector<int32_t>& tokens, const std::vector<KvCache*>& caches) {
  return decode_step(tokens, caches);
}

Llama::Rotation Llama::next_rotation(std::span<KvCache* const> caches) {
  const int64_t B = int64_t(caches.size()), D = config_.rotated_dims();
  const Device device = anchor().device();
  // The tables' variant each row would take alone (longrope's depends on its length): usually one for all.
  Tensor where = Tensor::empty({B}, DType::i64);
  int64_t furthest = 0;
  int variant = -1;
  bool one_variant = true;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t position = caches[size_t(b)]->length();
    KILN_CHECK(position < config_.max_positions, "the text holds ", position + 1, " tokens, more than the model's ",
               config_.max_positions, " positions (max_position_embeddings); shorten it");
    const int v = ensure_rope(position + 1, device, position + 1);
    one_variant = one_variant && (variant < 0 || v == variant);
    variant = v;
    where.data<int64_t>()[b] = position;
    furthest = std::max(furthest, position + 1);
  }
  if (!one_variant) {  // rare: each row's own rows, stacked
    std::vector<Rotation> each;
    for (KvCache* c : caches) each.push_back(rope_rows(c->length(), 1, c->length() + 1));
    auto stacked = [&](Tensor Rotation::*part) {
      if (!(each[0].*part).defined()) return Tensor();
      std::vector<Tensor> rows;
      for (const Rotation& r : each) rows.push_back(r.*part);
      return reshape(cat(rows, 0), {B, 1, 1, D});
    };
    return {stacked(&Rotation::cos), stacked(&Rotation::sin), stacked(&Rotation::local_cos),
            stacked(&Rotation::local_sin)};
  }
  const Tensor positions = where.to(device);
  auto gathered = [&](const Tensor& table) { return reshape(embedding(table, positions), {B, 1, 1, D}); };
  Rotation r{gathered(rope_cos_[variant]), gathered(rope_sin_[variant]), {}, {}};
  if (config_.local_rope_theta > 0) {
    const int local = ensure_rope(furthest, device, furthest, /*local=*/true);
    r.local_cos = gathered(rope_cos_[local]), r.local_sin = gathered(rope_sin_[local]);
  }
  return r;
}

// Written to allocate nothing but tensors (which the allocator keeps): a
// step's host work runs once a token.
Tensor Llama::decode_step(std::span<const int32_t> tokens, std::span<KvCache* const> caches) {
  NoGradGuard ng;
  const int64_t B = int64_t(tokens.size());
  KILN_CHECK(B >= 1 && caches.size() == tokens.size(), "llama decode: ", tokens.size(), " tokens for ", caches.size(),
             " caches");
  for (const KvCache* c : caches)
    if (crosses_rope_switch(c->length(), 1)) {  // rare: once per sequence; each row through forward_prompts
      std::vector<Tensor> rows;
      for (int64_t b = 0; b < B; ++b) rows.push_back(forward_prompts({{tokens[size_t(b)]}}, {caches[size_t(b)]}));
      return cat(rows, 0);
    }
  const Rotation rotation = next_rotation(caches);
  const nn::PagedStep step = plan_step(caches, nn::one_position_each(caches.size()));
  Tensor ids = Tensor::empty({B, 1}, DType::i64);
  std::copy(tokens.begin(), tokens.end(), ids.data<int64_t>());
  Tensor x = hidden(ids.to(anchor().device()), rotation, &step, true);
  for (int64_t b = 0; b < B; ++b) caches[size_t(b)]->commit(tokens.subspan(size_t(b), 1));
  return reshape(head(x), {B, config_.vocab_size});
}

// Prompts as one padded batch; each row at its own positions (after the
// prefix its cache took), its padding after it: causal attention keeps the
// padding from every real position, and no padding reaches the pages.
Tensor Llama::forward_prompts(const std::vector<std::vector<int64_t>>& prompts, const std::vector<KvCache*>& caches) {
  NoGradGuard ng;
  for (size_t b = 0; b < prompts.size() && b < caches.size(); ++b)
    if (crosses_rope_switch(caches[b]->length(), int64_t(prompts[b].size()))) {
      std::vector<std::vector<int64_t>> whole = prompts;
      whole[b].insert(whole[b].begin(), caches[b]->tokens().begin(), caches[b]->tokens().end());
      caches[b]->clear();
      return forward_prompts(whole, caches);
    }
  const PromptBatch p = batch_prompts(prompts, caches, context_length());
  const int64_t B = int64_t(prompts.size()), T = p.T, D = config_.rotated_dims();
  rope_rows(0, p.furthest, p.furthest);  // checks the positions
  const Device device = anchor().device();
  const Tensor where = Tensor::from_vector(p.positions, {B, T}).to(device);
  // Each row's cos and sin (embedding() gathers rows of any table): [B, 1, T, D] against heads [B, H, T, D].
  // A row takes the frequencies it would alone (longrope's depend on its length), so batching changes nothing.
  std::vector<int> variants;
  for (int64_t b = 0; b < B; ++b)
    variants.push_back(ensure_rope(p.furthest, device, p.positions[size_t(p.last_rows[size_t(b)])] + 1));
  Tensor cos, sin;
  if (std::all_of(variants.begin(), variants.end(), [&](int v) { return v == variants[0]; })) {
    cos = embedding(rope_cos_[variants[0]], where), sin = embedding(rope_sin_[variants[0]], where);
  } else {
    std::vector<Tensor> cos_rows, sin_rows;
    for (int64_t b = 0; b < B; ++b) {
      const Tensor row = slice(where, 0, b, b + 1);
      cos_rows.push_back(embedding(rope_cos_[variants[size_t(b)]], row));
      sin_rows.push_back(embedding(rope_sin_[variants[size_t(b)]], row));
    }
    cos = cat(cos_rows, 0), sin = cat(sin_rows, 0);
  }
  Rotation rotation{reshape(cos, {B, 1, T, D}), reshape(sin, {B, 1, T, D}), {}, {}};
  if (config_.local_rope_theta > 0) {
    const int local = ensure_rope(p.furthest, device, p.furthest, /*local=*/true);
    rotation.local_cos = reshape(embedding(rope_cos_[local], where), {B, 1, T, D});
    rotation.local_sin = reshape(embedding(rope_sin_[local], where), {B, 1, T, D});
  }
  const nn::PagedStep step = plan_step(caches, p.lengths);
  const nn::RealRows real(p.lengths, T, device);
  Tensor x = hidden(Tensor::from_vector(p.ids, {B, T}).to(device), rotation, &step, p.any_past || batch_invariant(),
                    &real);
  for (int64_t b = 0; b < B; ++b) caches[size_t(b)]->commit(p.fresh[size_t(b)]);
  const Tensor last =
      embedding(reshape(x, {B * T, config_.hidden_size}), Tensor::from_vector(p.last_rows, {B}).to(device));
  return head(last);
}

// Every layer's window, or none for the global layers and local spans for the sliding ones.
nn::PagedStep Llama::plan_step(std::span<KvCache* const> caches, std::span<const int64_t> new_positions) const {
  const bool mixed = !config_.sliding_layers.empty();
  return nn::plan_step(caches, new_positions, mixed ? 0 : config_.sliding_window, anchor().device(),
                       mixed ? config_.sliding_window : 0);
}

KvCache Llama::new_cache() const {
  check_causal("does not generate");
  const Tensor& w = anchor();
  nn::KvLayout layout{config_.num_layers, config_.num_kv_heads, config_.head_dim, w.dtype(), w.device()};
  KvCache cache(pool_for(layout), context_length());
  // longrope rotates a position by the sequence's length, not by the tokens before it alone.
  cache.share_prefixes(config_.rope_scaling.type != "longrope");
  return cache;
}

}  // namespace kiln::models
