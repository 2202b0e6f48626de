#include "kiln/core/error.h"
#include "models/hf/gguf_encoder.h"
#include "models/hf/gguf_encoder_names.h"

// (Apart from gguf_encoder.cpp, which reads tensors: the GGUF fuzzer reads configs without a tensor library.)
namespace kiln::models {
namespace {

using nlohmann::json;

int64_t rows_of(const GgufContents& file, const char* name) {
  const GgufTensorInfo* t = file.find(name);
  KILN_CHECK(t && t->dims.size() == 2, "GGUF: the file lacks a 2-D ", name);
  return t->dims[1];
}

// transformers' BertModel config.
json bert_config(const GgufContents& file, const GgufMeta& meta) {
  return {{"model_type", "bert"},
          {"architectures", {"BertModel"}},
          {"hidden_size", meta.positive("embedding_length")},
          {"num_hidden_layers", meta.positive("block_count")},
          {"num_attention_heads", meta.positive("attention.head_count")},
          {"intermediate_size", meta.positive("feed_forward_length")},
          {"max_position_embeddings", rows_of(file, "position_embd.weight")},
          {"vocab_size", rows_of(file, "token_embd.weight")},
          {"type_vocab_size", file.find("token_types.weight") ? rows_of(file, "token_types.weight") : 0},
          {"layer_norm_eps", meta.number("attention.layer_norm_epsilon", 1e-12)},
          {"hidden_act", "gelu"}};
}

// nomic-embed-text's own config (models/bert/nomic_bert.h), as llama.cpp's converter read it.
json nomic_bert_config(const GgufContents& file, const GgufMeta& meta) {
  const int64_t positions = meta.positive("context_length");
  return {{"model_type", "nomic_bert"},
          {"architectures", {"NomicBertModel"}},
          {"n_embd", meta.positive("embedding_length")},
          {"n_layer", meta.positive("block_count")},
          {"n_head", meta.positive("attention.head_count")},
          {"n_inner", meta.positive("feed_forward_length")},
          {"n_positions", positions},
          {"max_trained_positions", positions},
          {"vocab_size", rows_of(file, "token_embd.weight")},
          {"type_vocab_size", file.find("token_types.weight") ? rows_of(file, "token_types.weight") : 0},
          {"layer_norm_epsilon", meta.number("attention.layer_norm_epsilon", 1e-12)},
          {"rotary_emb_base", meta.number("rope.freq_base", 10000)},
          {"activation_function", "swiglu"},
          {"qkv_proj_bias", file.find("blk.0.attn_qkv.bias") != nullptr},
          {"mlp_fc1_bias", file.find("blk.0.ffn_up.bias") != nullptr},
          {"mlp_fc2_bias", file.find("blk.0.ffn_down.bias") != nullptr}};
}

// A reranker (what llama-server --reranking runs): a cross-encoder's head as llama.cpp's converter writes
// RoBERTa's, "cls" (a dense layer, tanh) then "cls.output" (the labels' logits), as BERT's pooler and classifier.
void add_classifier_head(const GgufContents& file, const GgufMeta& meta, json& c) {
  KILN_CHECK(file.find("cls.weight"),
             "GGUF: this reranker has a classifier ('cls.output') but no pooler ('cls'): "
             "llama.cpp's converter drops BERT's pooler, so the file no longer scores pairs as its model does; run "
             "the model's Hugging Face folder (hf:DIR) instead");
  c["architectures"] = {"BertForSequenceClassification"};
  c["id2label"] = gguf_classifier_id2label(file, meta);
}

using ConfigOf = json (*)(const GgufContents&, const GgufMeta&);
const std::pair<const char*, ConfigOf> kConfigs[] = {{"bert", bert_config}, {"nomic-bert", nomic_bert_config}};

}  // namespace

json gguf_classifier_id2label(const GgufContents& file, const GgufMeta& meta) {
  const int64_t labels = rows_of(file, "cls.output.weight");
  json names = json::object();
  const json given = meta.has("classifier.output_labels") ? meta.at("classifier.output_labels") : json();
  KILN_CHECK(given.is_null() || (given.is_array() && int64_t(given.size()) == labels), "GGUF: '", meta.p,
             "classifier.output_labels' is not one name for each of the classifier's ", labels, " outputs");
  for (int64_t i = 0; i < labels; ++i) {
    KILN_CHECK(given.is_null() || given[size_t(i)].is_string(), "GGUF: a classifier output label is not text");
    names[std::to_string(i)] = given.is_null() ? "LABEL_" + std::to_string(i) : given[size_t(i)].get<std::string>();
  }
  return names;
}

std::string gguf_encoder_arch_name(const json& metadata) {
  const json arch = metadata.value("general.architecture", json());
  return arch.is_string() ? arch.get<std::string>() : "";
}

bool is_gguf_encoder(const json& metadata) { return gguf_encoder_arch(gguf_encoder_arch_name(metadata)) != nullptr; }

json gguf_encoder_config(const GgufContents& file) {
  const json& m = file.header.metadata;
  const std::string arch = gguf_encoder_arch_name(m);
  const GgufMeta meta{m, arch + "."};
  KILN_CHECK(m.value(arch + ".attention.causal", json(false)) == json(false), "GGUF: a ", arch,
             " file with causal attention is not an encoder Kiln reads");
  json c;
  for (const auto& [name, config_of] : kConfigs)
    if (arch == name) c = config_of(file, meta);
  KILN_CHECK(!c.is_null(), "GGUF: ", arch, " is not an encoder Kiln reads");
  if (arch == "bert" && file.find("cls.output.weight")) add_classifier_head(file, meta, c);
  const int64_t layers = meta.positive("block_count");
  KILN_CHECK(layers <= kGgufMaxLayers, "GGUF: '", arch, ".block_count' is ", layers, "; the file is likely damaged");
  if (const json pad = m.value("tokenizer.ggml.padding_token_id", json());
      pad.is_number_integer() && pad.get<int64_t>() >= 0 && pad.get<int64_t>() < rows_of(file, "token_embd.weight"))
    c["pad_token_id"] = pad;
  return c;
}

}  // namespace kiln::models
