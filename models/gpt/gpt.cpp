#include "models/gpt/gpt.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "kiln/amp/autocast.h"
#include "kiln/autograd/checkpoint.h"
#include "kiln/backend/batch_invariant.h"

namespace kiln::models {

using namespace kiln::nn;

nlohmann::json GptConfig::to_json() const {
  nlohmann::json j = {{"vocab_size", vocab_size}, {"block_size", block_size}, {"n_layer", n_layer},
                      {"n_head", n_head},         {"n_embd", n_embd},         {"dropout", dropout}};
  if (embedding_dropout) j["embedding_dropout"] = *embedding_dropout;
  if (attention_dropout != 0) j["attention_dropout"] = attention_dropout;
  return j;
}

GptConfig GptConfig::from_json(const nlohmann::json& j) {
  GptConfig c;
  c.vocab_size = j.at("vocab_size");
  c.block_size = j.at("block_size");
  c.n_layer = j.at("n_layer");
  c.n_head = j.at("n_head");
  c.n_embd = j.at("n_embd");
  c.dropout = j.value("dropout", 0.0);
  if (j.contains("embedding_dropout")) c.embedding_dropout = j["embedding_dropout"].get<double>();
  c.attention_dropout = j.value("attention_dropout", 0.0);
  return c;
}

namespace {

// The MLP's own module, so its parameters are named mlp.c_fc / mlp.c_proj.
class Mlp : public Module {
 public:
  Mlp(const GptConfig& c, Generator& init, std::shared_ptr<Generator> dropout_gen) {
    c_fc = register_module("c_fc", std::make_shared<Linear>(c.n_embd, 4 * c.n_embd, init));
    c_proj = register_module("c_proj", std::make_shared<Linear>(4 * c.n_embd, c.n_embd, init));
    drop = register_module("dropout", std::make_shared<Dropout>(c.dropout, std::move(dropout_gen)));
  }
  Tensor forward(const Tensor& x) override { return forward(x, {}); }
  // Selective checkpointing: the linears keep, instead of their inputs, a
  // way to recompute them: x from `recompute_x`, GELU's output from c_fc's
  // output (linear_of_gelu keeps only that, and never holds GELU's output whole).
  Tensor forward(const Tensor& x, std::function<Tensor()> recompute_x) {
    // Quantized or LoRA-adapted layers run through forward; the fused paths take bare weights.
    if (c_proj->quantized || c_fc->lora_A || c_proj->lora_A) return drop->forward(c_proj->forward(gelu(c_fc->forward(x))));
    if (!recompute_x) return drop->forward(linear_of_gelu(c_fc->forward(x), c_proj->weight, c_proj->bias, true));
    Tensor h = linear_recomputing_input(x, c_fc->weight, c_fc->bias, std::move(recompute_x));
    return drop->forward(linear_of_gelu(h, c_proj->weight, c_proj->bias, false));
  }
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> drop;
};

}  // namespace

// GPT-2 initialisation: N(0, 0.02) for weights, zeros for biases, and the
// residual projections scaled down by sqrt(2 * n_layer).
void gpt2_init(Module& model, const GptConfig& c, Generator& gen) {
  NoGradGuard ng;
  for (auto& [name, p] : model.named_parameters()) {
    bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    bool is_norm = name.find(".ln_") != std::string::npos || name.find("ln_f") != std::string::npos;
    if (is_norm) continue;
    if (is_bias) {
      backend_for(p).fill(p, 0.0);
      continue;
    }
    double std = 0.02;
    if (name.find("c_proj.weight") != std::string::npos) std /= std::sqrt(2.0 * double(c.n_layer));
    copy_into(normal_tensor(p.shape(), std, gen), p);
  }
}

GptBlock::GptBlock(const GptConfig& c, Generator& init, std::shared_ptr<Generator> dropout_gen) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c.n_embd, c.n_head, c.dropout, init,
                                                                         dropout_gen, c.attention_dropout));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd));
  mlp = register_module("mlp", std::make_shared<Mlp>(c, init, dropout_gen));
}

Tensor GptBlock::forward_paged(const Tensor& x, const nn::PagedStep& step, int64_t layer, const nn::RealRows& real,
                               bool read_pages) {
  Tensor h = add(x, attn->forward_paged(ln_1->forward(x), step, layer, real, read_pages));
  return add(h, mlp->forward(ln_2->forward(h)));
}

// The layernorms' outputs feed only the q|k|v and MLP projections, so under
// autocast they are written in its dtype (LayerNorm::forward_for_matmul).
Tensor GptBlock::forward(const Tensor& x) {
  if (!selective) {
    Tensor h = add(x, attn->forward(ln_1->forward_for_matmul(x)));
    return add(h, mlp->forward(ln_2->forward_for_matmul(h)));
  }
  // Layernorm outputs are recomputed from the block's input and from h,
  // which their own nodes keep anyway.
  auto ln1_again = [ln = ln_1, x = x.detach()] { return ln->forward_for_matmul(x); };
  Tensor h = add(x, attn->forward(ln_1->forward_for_matmul(x), ln1_again));
  auto ln2_again = [ln = ln_2, h = h.detach()] { return ln->forward_for_matmul(h); };
  return add(h, static_cast<Mlp&>(*mlp).forward(ln_2->forward_for_matmul(h), ln2_again));
}

Gpt::Gpt(const GptConfig& c, Generator& init, std::shared_ptr<Generator> dropout_gen) : config_(c) {
  auto transformer = register_module("transformer", std::make_shared<Named>());
  wte_ = transformer->add("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, init));
  wpe_ = transformer->add("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd, init));
  drop_ = transformer->add("drop", std::make_shared<Dropout>(c.embedding_dropout.value_or(c.dropout), dropout_gen));
  h_ = transformer->add("h", std::make_shared<Sequential>());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    blocks_.push_back(std::make_shared<GptBlock>(c, init, dropout_gen));
    h_->add(blocks_.back());
  }
  dropout_gen_ = dropout_gen;
  ln_f_ = transformer->add("ln_f", std::make_shared<LayerNorm>(c.n_embd));
  gpt2_init(*this, c, init);
}

Tensor Gpt::embed(const Tensor& ids) {
  KILN_CHECK(ids.dim() == 2, "gpt: ids must be [B, T], got ", shape_str(ids.shape()));
  const int64_t T = ids.size(1);
  KILN_CHECK(T <= config_.block_size, "gpt: sequence length ", T, " exceeds block_size ", config_.block_size);
  Tensor pos = arange(T, DType::i64, ids.device());
  return drop_->forward(add(wte_->forward(ids), wpe_->forward(pos)));
}

Tensor Gpt::run_blocks(Tensor x, int64_t first, int64_t last) {
  for (int64_t i = first; i < last; ++i) {
    const auto& block = blocks_[size_t(i)];
    if (checkpointing_ == ActivationCheckpointing::blocks)
      x = checkpoint([&](const Tensor& in) { return block->forward(in); }, x, {dropout_gen_.get()});
    else
      x = block->forward(x);
  }
  return x;
}

Tensor Gpt::stage_forward(const Tensor& in, const Tensor& targets, int64_t first, int64_t last) {
  KILN_CHECK(0 <= first && first < last && last <= config_.n_layer, "gpt: no stage of blocks [", first, ", ", last,
             ") in ", config_.n_layer, " layers");
  Tensor x = run_blocks(first == 0 ? embed(in) : in, first, last);
  if (last < config_.n_layer) return x;
  return linear_cross_entropy(ln_f_->forward(x), wte_->weight, targets);
}

std::vector<std::string> Gpt::stage_parameter_names(int64_t first, int64_t last) const {
  std::vector<std::string> names;
  for (const auto& [name, p] : named_parameters()) {
    bool used = false;
    if (name.starts_with("transformer.wte.")) used = first == 0 || last == config_.n_layer;
    else if (name.starts_with("transformer.wpe.")) used = first == 0;
    else if (name.starts_with("transformer.ln_f.")) used = last == config_.n_layer;
    else
      for (int64_t i = first; i < last && !used; ++i)
        used = name.starts_with("transformer.h." + std::to_string(i) + ".");
    if (used) names.push_back(name);
  }
  return names;
}

// The tied output embedding, quantized or not.
Tensor Gpt::head(const Tensor& x) const { return nn::linear_or_quantized(x, wte_->weight, wte_->quantized); }

Tensor Gpt::forward(const Tensor& ids) {
  Tensor x = final_stream(ids);
  if (checkpointing_ != ActivationCheckpointing::selective)
    return head(ln_f_->forward(x));  // tied output embedding
  auto ln_f_again = [ln = ln_f_, x = x.detach()] { return ln->forward(x); };
  return linear_recomputing_input(ln_f_->forward(x), wte_->weight, Tensor(), ln_f_again);
}

KvCache Gpt::new_cache() const {
  // Under autocast the keys and values are made, and read by the products, in
  // its dtype: a cache in f32 would be cast whole at every decode step.
  const Tensor& w = ln_f_->weight;  // never quantized: where and in what dtype the model runs
  const DType dtype = amp::autocast_should_lower({&w}) ? *amp::autocast_dtype() : w.dtype();
  nn::KvLayout layout{config_.n_layer, config_.n_head, config_.n_embd / config_.n_head, dtype, w.device()};
  return KvCache(pool_for(layout), config_.block_size);
}

Tensor Gpt::forward_cached(const Tensor& ids, KvCache& cache) {
  KILN_CHECK(ids.dim() == 2 && ids.size(0) == 1, "gpt: a cached forward takes ids [1, n], got ",
             shape_str(ids.shape()));
  if (const std::optional<int32_t> token = one_more_token(ids, cache, config_.vocab_size)) {
    KvCache* const one = &cache;
    return decode_step(std::span(&*token, 1), std::span(&one, 1));
  }
  return forward_prompts({ids.to(Device::cpu()).to_vector<int64_t>()}, {&cache});
}

Tensor Gpt::forward_prompts(const std::vector<std::vector<int64_t>>& prompts, const std::vector<KvCache*>& caches) {
  NoGradGuard ng;
  const PromptBatch p = batch_prompts(prompts, caches, config_.block_size);
  const int64_t B = int64_t(prompts.size());
  const Device device = ln_f_->weight.device();
  const nn::PagedStep step = nn::plan_step(caches, p.lengths, 0, device);
  const nn::RealRows real(p.lengths, p.T, device);
  Tensor x = add(wte_->forward(Tensor::from_vector(p.ids, {B, p.T}).to(device)),
                 wpe_->forward(Tensor::from_vector(p.positions, {B, p.T}).to(device)));
  const bool read_pages = p.any_past || batch_invariant();
  for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->forward_paged(x, step, int64_t(i), real, read_pages);
  for (int64_t b = 0; b < B; ++b) caches[size_t(b)]->commit(p.fresh[size_t(b)]);
  // Each prompt's last row of the final stream (embedding() gathers rows of any table).
  Tensor last = embedding(reshape(ln_f_->forward(x), {B * p.T, config_.n_embd}),
                          Tensor::from_vector(p.last_rows, {B}).to(device));
  return head(last);
}

Tensor Gpt::forward_decode(const std::vector<int32_t>& tokens, const std::vector<KvCache*>& caches) {
  return decode_step(tokens, caches);
}

// forward_prompts for one token a cache, written to allocate nothing but
// tensors (which the allocator keeps): the ids and positions go straight
// into tensors, and no row is padding.
Tensor Gpt::decode_step(std::span<const int32_t> tokens, std::span<KvCache* const> caches) {
  NoGradGuard ng;
  const int64_t B = int64_t(tokens.size());
  KILN_CHECK(B >= 1 && caches.size() == tokens.size(), "gpt decode: ", tokens.size(), " tokens for ", caches.size(),
             " caches");
  Tensor ids = Tensor::empty({B, 1}, DType::i64), positions = Tensor::empty({B, 1}, DType::i64);
  for (int64_t b = 0; b < B; ++b) {
    ids.data<int64_t>()[b] = tokens[size_t(b)];
    positions.data<int64_t>()[b] = caches[size_t(b)]->length();
  }
  const Device device = ln_f_->weight.device();
  const nn::PagedStep step = nn::plan_step(caches, nn::one_position_each(caches.size()), 0, device);  // (a full cache is an error here)
  Tensor x = add(wte_->forward(ids.to(device)), wpe_->forward(positions.to(device)));
  const nn::RealRows no_padding;
  for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->forward_paged(x, step, int64_t(i), no_padding, true);
  for (int64_t b = 0; b < B; ++b) caches[size_t(b)]->commit(tokens.subspan(size_t(b), 1));
  return head(reshape(ln_f_->forward(x), {B, config_.n_embd}));
}

Tensor Gpt::loss(const Tensor& ids, const Tensor& targets) {
  // The logits never exist whole: the fused head forms them a chunk at a
  // time and keeps only the gradients of its inputs.
  return stage_forward(ids, targets, 0, config_.n_layer);
}


void Gpt::set_activation_checkpointing(ActivationCheckpointing mode) {
  checkpointing_ = mode;
  for (const auto& block : blocks_) block->selective = mode == ActivationCheckpointing::selective;
}

std::vector<int32_t> Gpt::generate(std::vector<int32_t> tokens, int64_t max_new_tokens, double temperature,
                                   int64_t top_k, Generator& gen, double top_p,
                                   const std::function<bool(int32_t)>& on_token) {
  KILN_CHECK(temperature >= 0, "sampling temperature must be >= 0 (0: greedy), got ", temperature);
  KILN_CHECK(top_p > 0 && top_p <= 1, "top_p must be in (0, 1], got ", top_p);
  KILN_CHECK(!tokens.empty(), "generate needs at least one prompt token");
  NoGradGuard ng;
  Device device = ln_f_->weight.device();
  KvCache cache = new_cache();
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    // The prompt (or, once the context is full, its last block_size tokens)
    // fills the cache; after that each step feeds only the newest token.
    if (cache.length() >= config_.block_size) cache.clear();
    size_t start = cache.length() > 0 ? tokens.size() - 1
                   : tokens.size() > size_t(config_.block_size) ? tokens.size() - size_t(config_.block_size) : 0;
    std::vector<int64_t> window(tokens.begin() + long(start), tokens.end());
    Tensor ids = Tensor::from_vector(window, {1, int64_t(window.size())}).to(device);
    const int32_t next = sample_token(forward_cached(ids, cache).to_vector<float>(), temperature, top_k, top_p, gen);
    tokens.push_back(next);
    if (on_token && !on_token(next)) break;
  }
  return tokens;
}

}  // namespace kiln::models
