#include "models/bert/bert.h"

#include <cmath>
#include <map>

#include "kiln/backend/batch_invariant.h"
#include "kiln/backend/factory.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/init.h"

namespace kiln::models {

using namespace kiln::nn;

namespace bert_parts {

// Where each flavour keeps its weights (transformers' names).
struct Names {
  std::string base, layers;                                       // "bert", "encoder.layer"
  std::string q, k, v, o, attn_norm, ffn_in, ffn_out, ffn_norm;  // within a layer
  std::string head;        // BERT's pooler, DistilBERT's pre-classifier, RoBERTa's head's dense
  std::string classifier;  // the layer that gives the labels' logits
};

const Names& names_of(const std::string& flavor) {
  static const Names bert{"bert",
                          "encoder.layer",
                          "attention.self.query",
                          "attention.self.key",
                          "attention.self.value",
                          "attention.output.dense",
                          "attention.output.LayerNorm",
                          "intermediate.dense",
                          "output.dense",
                          "output.LayerNorm",
                          "bert.pooler.dense",
                          "classifier"};
  static const Names distilbert{"distilbert", "transformer.layer", "attention.q_lin", "attention.k_lin",
                                "attention.v_lin", "attention.out_lin", "sa_layer_norm", "ffn.lin1",
                                "ffn.lin2", "output_layer_norm", "pre_classifier", "classifier"};
  static const Names roberta = [] {
    Names n = bert;
    n.base = "roberta", n.head = "classifier.dense", n.classifier = "classifier.out_proj";
    return n;
  }();
  static const std::map<std::string, const Names*> by_flavor = {
      {"bert", &bert}, {"distilbert", &distilbert}, {"roberta", &roberta}};
  const auto it = by_flavor.find(flavor);
  KILN_CHECK(it != by_flavor.end(), "unknown BERT flavour '", flavor, "'");
  return *it->second;
}

class EncoderLayer : public Module {
 public:
  EncoderLayer(const BertConfig& c, const Names& n, Generator& init, const std::shared_ptr<Generator>& dropout_gen)
      : heads_(c.num_heads) {
    const int64_t H = c.hidden_size;
    q = register_module(n.q, std::make_shared<Linear>(H, H, init));
    k = register_module(n.k, std::make_shared<Linear>(H, H, init));
    v = register_module(n.v, std::make_shared<Linear>(H, H, init));
    o = register_module(n.o, std::make_shared<Linear>(H, H, init));
    attn_norm = register_module(n.attn_norm, std::make_shared<LayerNorm>(H, c.layer_norm_eps));
    ffn_in = register_module(n.ffn_in, std::make_shared<Linear>(H, c.intermediate_size, init));
    ffn_out = register_module(n.ffn_out, std::make_shared<Linear>(c.intermediate_size, H, init));
    ffn_norm = register_module(n.ffn_norm, std::make_shared<LayerNorm>(H, c.layer_norm_eps));
    probs_dropout = register_module("attention_dropout", std::make_shared<Dropout>(c.attention_dropout, dropout_gen));
    attn_dropout = register_module("attention_output_dropout",
                                   std::make_shared<Dropout>(c.attention_output_dropout, dropout_gen));
    ffn_dropout = register_module("ffn_dropout", std::make_shared<Dropout>(c.hidden_dropout, dropout_gen));
  }
  Tensor forward(const Tensor& x) override { return forward(x, Tensor(), {}); }
  // `key_bias` [B, 1, 1, T]: 0 for a row's real tokens, blocked for its
  // padding (nn::key_padding_bias), added to the scores so that no token attends to padding;
  // undefined when every row is all real tokens (the fused attention op).
  // In batch-invariant mode attention runs by rows over each text's
  // lengths[b] real tokens instead.
  Tensor forward(const Tensor& x, const Tensor& key_bias, const std::vector<int64_t>& lengths) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / heads_;
    if (batch_invariant() && !grad_enabled()) {
      auto rows = [&](const Tensor& t) { return reshape(t, {B, T, heads_, D}); };
      const Tensor a = attention_by_rows(rows(q->forward(x)), rows(k->forward(x)), rows(v->forward(x)),
                                         lengths.empty() ? std::vector<int64_t>(size_t(B), T) : lengths, false);
      return finish(x, to_dtype(a, x.dtype()));
    }
    auto split = [&](const Tensor& t) { return contiguous(transpose(reshape(t, {B, T, heads_, D}), 1, 2)); };
    Tensor qh = split(q->forward(x)), kh = split(k->forward(x)), vh = split(v->forward(x));
    // Written out for a padding mask, or for dropout on the probabilities.
    Tensor a = key_bias.defined() || (is_training() && probs_dropout->p() > 0)
                   ? attention_written_out(qh, kh, vh, key_bias, probs_dropout.get())
                   : scaled_dot_product_attention(qh, kh, vh, false);
    return finish(x, reshape(transpose(a, 1, 2), {B, T, C}));
  }
  // After attention (heads merged, [B, T, C]): the output projection, the norms and the feed-forward.
  Tensor finish(const Tensor& x, const Tensor& a) {
    Tensor h = attn_norm->forward(x + attn_dropout->forward(o->forward(a)));
    return ffn_norm->forward(h + ffn_dropout->forward(ffn_out->forward(gelu_erf(ffn_in->forward(h)))));
  }
  std::shared_ptr<Linear> q, k, v, o, ffn_in, ffn_out;
  std::shared_ptr<LayerNorm> attn_norm, ffn_norm;
  std::shared_ptr<Dropout> probs_dropout, attn_dropout, ffn_dropout;

 private:
  int64_t heads_;
};

}  // namespace bert_parts

using namespace bert_parts;

struct BertEncoder::Parts {
  std::shared_ptr<Embedding> words, positions, types;
  std::shared_ptr<LayerNorm> emb_norm;
  std::shared_ptr<Dropout> emb_dropout;
  std::vector<std::shared_ptr<EncoderLayer>> layers;
};

BertEncoder::BertEncoder(const BertConfig& c, Generator& init) : config_(c), parts_(std::make_shared<Parts>()) {
  KILN_CHECK(c.num_heads > 0 && c.hidden_size % c.num_heads == 0, "bert: hidden size ", c.hidden_size,
             " is not a multiple of the ", c.num_heads, " heads");
  const Names& n = names_of(c.flavor);
  Parts& p = *parts_;
  const auto dropout_gen = std::make_shared<Generator>(0);  // until a run hands the model its own
  auto emb = register_module("embeddings", std::make_shared<Named>());
  p.words = emb->add("word_embeddings", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, init));
  p.positions = emb->add("position_embeddings", std::make_shared<Embedding>(c.max_positions, c.hidden_size, init));
  p.words->padding_idx = c.pad_token_id;  // transformers' nn.Embedding(padding_idx=pad_token_id)
  if (c.flavor == "roberta") p.positions->padding_idx = c.pad_token_id;
  if (c.type_vocab_size > 0)
    p.types = emb->add("token_type_embeddings", std::make_shared<Embedding>(c.type_vocab_size, c.hidden_size, init));
  p.emb_norm = emb->add("LayerNorm", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
  p.emb_dropout = emb->add("dropout", std::make_shared<Dropout>(c.hidden_dropout, dropout_gen));
  auto stack = register_module(n.layers, std::make_shared<Named>());
  for (int64_t i = 0; i < c.num_layers; ++i)
    p.layers.push_back(stack->add(std::to_string(i), std::make_shared<EncoderLayer>(c, n, init, dropout_gen)));
}

Tensor BertEncoder::forward(const Tensor& ids, const Tensor& token_types, const std::vector<int64_t>& lengths) {
  const Parts& p = *parts_;
  const int64_t T = ids.size(1), offset = config_.position_offset;
  KILN_CHECK(T + offset <= config_.max_positions, "the text is ", T, " tokens, more than the model's ",
             config_.max_positions - offset, " positions (max_position_embeddings); shorten it");
  // Positions [offset, offset + T): RoBERTa's follow its padding id (padded rows' padding is never attended to).
  const Tensor where = slice(arange(offset + T, DType::i64, ids.device()), 0, offset, offset + T);
  Tensor x = p.words->forward(ids) + p.positions->forward(where);
  if (p.types)  // one segment, type 0, unless the types are given (a pair: the second text's 1)
    x = x + p.types->forward(token_types.defined() ? token_types : zeros({T}, DType::i64, ids.device()));
  x = p.emb_dropout->forward(p.emb_norm->forward(x));
  KILN_CHECK(lengths.empty() || int64_t(lengths.size()) == ids.size(0), "bert: ", lengths.size(), " lengths for ",
             ids.size(0), " rows");
  const Tensor key_bias = nn::key_padding_bias(lengths, T, ids.device());
  for (const auto& layer : p.layers) x = layer->forward(x, key_bias, lengths);
  return x;
}

struct BertClassifier::Head {
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> dense, classifier;
};

BertClassifier::BertClassifier(const BertConfig& c, Generator& init) : config_(c), head_(std::make_shared<Head>()) {
  KILN_CHECK(!c.labels.empty(), "bert: a classifier needs labels (config.json's id2label)");
  const Names& n = names_of(c.flavor);
  encoder_ = register_module(n.base, std::make_shared<BertEncoder>(c, init));
  // BERT's pooler sits under the base ("bert.pooler.dense"); DistilBERT's pre-classifier at the top.
  head_->dense = register_module(n.head, std::make_shared<Linear>(c.hidden_size, c.hidden_size, init));
  head_->dropout = register_module("dropout", std::make_shared<Dropout>(c.classifier_dropout, std::make_shared<Generator>(0)));
  head_->classifier = register_module(n.classifier, std::make_shared<Linear>(c.hidden_size, int64_t(c.labels.size()), init));
}

void BertClassifier::replace_classifier(const std::vector<std::string>& labels, double stddev, Generator& init) {
  auto layer = new_classifier_layer(config_.hidden_size, labels, stddev, init, head_->dense->weight.device());
  const std::string& name = names_of(config_.flavor).classifier;
  drop_module(name);
  head_->classifier = register_module(name, layer);
  config_.labels = labels;
}

Tensor BertClassifier::forward(const Tensor& ids) { return forward(ids, {}); }

Tensor BertClassifier::forward(const Tensor& ids, const Tensor& token_types, const std::vector<int64_t>& lengths) {
  const Head& h = *head_;
  Tensor first =
      squeeze(slice(encoder_->forward(ids, token_types, lengths), 1, 0, 1), 1);  // [B, C]: the [CLS] token's state
  Tensor pooled = config_.flavor == "distilbert" ? relu(h.dense->forward(first))
                  : config_.flavor == "roberta"  ? tanh(h.dense->forward(h.dropout->forward(first)))
                                                 : tanh(h.dense->forward(first));
  return h.classifier->forward(h.dropout->forward(pooled));
}

}  // namespace kiln::models
