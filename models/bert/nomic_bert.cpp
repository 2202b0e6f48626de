#include "models/bert/nomic_bert.h"

#include "kiln/nn/attention.h"
#include "models/bert/rotary_table.h"

namespace kiln::models {

using namespace kiln::nn;

namespace {

class NomicBertLayer : public Module {
 public:
  NomicBertLayer(const NomicBertConfig& c, Generator& init) : heads_(c.num_heads) {
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    auto attn = register_module("attn", std::make_shared<Named>());
    Wqkv = attn->add("Wqkv", std::make_shared<Linear>(H, 3 * H, init, c.qkv_bias));
    out_proj = attn->add("out_proj", std::make_shared<Linear>(H, H, init, c.qkv_bias));
    auto mlp = register_module("mlp", std::make_shared<Named>());
    fc11 = mlp->add("fc11", std::make_shared<Linear>(H, I, init, c.fc1_bias));
    fc12 = mlp->add("fc12", std::make_shared<Linear>(H, I, init, c.fc1_bias));
    fc2 = mlp->add("fc2", std::make_shared<Linear>(I, H, init, c.fc2_bias));
    norm1 = register_module("norm1", std::make_shared<LayerNorm>(H, c.layer_norm_eps));
    norm2 = register_module("norm2", std::make_shared<LayerNorm>(H, c.layer_norm_eps));
  }

  // x [B, T, C]; key_bias [B, 1, 1, T] (padding) or undefined.
  Tensor forward_at(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& key_bias) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / heads_;
    const Tensor qkv = Wqkv->forward(x);  // [q (all heads); k; v]
    auto heads = [&](int64_t part) {
      return contiguous(transpose(reshape(slice(qkv, -1, part * C, (part + 1) * C), {B, T, heads_, D}), 1, 2));
    };
    const Tensor cos_x = to_dtype(cos, x.dtype()), sin_x = to_dtype(sin, x.dtype());
    const Tensor q = rotary(heads(0), cos_x, sin_x), k = rotary(heads(1), cos_x, sin_x), v = heads(2);
    const Tensor a =
        key_bias.defined() ? attention_written_out(q, k, v, key_bias) : scaled_dot_product_attention(q, k, v, false);
    const Tensor h = norm1->forward(x + out_proj->forward(reshape(transpose(a, 1, 2), {B, T, C})));
    return norm2->forward(h + fc2->forward(silu_mul(fc12->forward(h), fc11->forward(h))));
  }

  std::shared_ptr<Linear> Wqkv, out_proj, fc11, fc12, fc2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  int64_t heads_;
};

}  // namespace

struct NomicBertEncoder::Parts {
  std::shared_ptr<Embedding> words, types;
  std::shared_ptr<LayerNorm> emb_ln;
  std::vector<std::shared_ptr<NomicBertLayer>> layers;
};

NomicBertEncoder::NomicBertEncoder(const NomicBertConfig& c, Generator& init)
    : config_(c), parts_(std::make_shared<Parts>()) {
  check_rotary_heads(c.hidden_size, c.num_heads, "nomic_bert");
  Parts& p = *parts_;
  auto emb = register_module("embeddings", std::make_shared<Named>());
  p.words = emb->add("word_embeddings", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, init));
  if (c.type_vocab_size > 0)
    p.types = emb->add("token_type_embeddings", std::make_shared<Embedding>(c.type_vocab_size, c.hidden_size, init));
  p.emb_ln = register_module("emb_ln", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
  auto layers = register_module("encoder", std::make_shared<Named>())->add("layers", std::make_shared<Named>());
  for (int64_t i = 0; i < c.num_layers; ++i)
    p.layers.push_back(layers->add(std::to_string(i), std::make_shared<NomicBertLayer>(c, init)));
}

Tensor NomicBertEncoder::forward(const Tensor& ids, const std::vector<int64_t>& lengths) {
  const Parts& p = *parts_;
  const int64_t B = ids.size(0), T = ids.size(1);
  KILN_CHECK(T <= config_.max_positions, "the text is ", T, " tokens, more than the model's ", config_.max_positions,
             " positions; shorten it");
  KILN_CHECK(lengths.empty() || int64_t(lengths.size()) == B, "nomic_bert: ", lengths.size(), " lengths for ", B,
             " rows");
  Tensor x = p.words->forward(ids);
  if (p.types) x = x + p.types->forward(zeros({T}, DType::i64, ids.device()));  // one segment: type 0
  x = p.emb_ln->forward(x);
  const Tensor key_bias = nn::key_padding_bias(lengths, T, ids.device());  // no token attends to a row's padding
  const auto [cos, sin] = rotary_table(T, config_.hidden_size / config_.num_heads, config_.rope_theta, ids.device());
  for (const auto& layer : p.layers) x = layer->forward_at(x, cos, sin, key_bias);
  return x;
}

}  // namespace kiln::models
