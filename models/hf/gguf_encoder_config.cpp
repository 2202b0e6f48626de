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

using ConfigOf = json (*)(const GgufContents&, const GgufMeta&);
const std::pair<const char*, ConfigOf> kConfigs[] = {{"bert", bert_config}, {"nomic-bert", nomic_bert_config}};

}  // namespace

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
  const int64_t layers = meta.positive("block_count");
  KILN_CHECK(layers <= kGgufMaxLayers, "GGUF: '", arch, ".block_count' is ", layers, "; the file is likely damaged");
  if (const json pad = m.value("tokenizer.ggml.padding_token_id", json());
      pad.is_number_integer() && pad.get<int64_t>() >= 0 && pad.get<int64_t>() < rows_of(file, "token_embd.weight"))
    c["pad_token_id"] = pad;
  return c;
}

}  // namespace kiln::models
