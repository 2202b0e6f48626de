#include "kiln/core/error.h"
#include "models/hf/gguf_encoder.h"

// (Apart from gguf_encoder.cpp, which reads tensors: the GGUF fuzzer reads configs without a tensor library.)
namespace kiln::models {
namespace {

using nlohmann::json;

int64_t rows_of(const GgufContents& file, const char* name) {
  const GgufTensorInfo* t = file.find(name);
  KILN_CHECK(t && t->dims.size() == 2, "GGUF: the file lacks a 2-D ", name);
  return t->dims[1];
}

}  // namespace

bool is_gguf_encoder(const json& metadata) { return metadata.value("general.architecture", json()) == "bert"; }

json gguf_encoder_config(const GgufContents& file) {
  const json& m = file.header.metadata;
  const GgufMeta meta{m, "bert."};
  KILN_CHECK(m.value("bert.attention.causal", json(false)) == json(false),
             "GGUF: a BERT file with causal attention is not an encoder Kiln reads");
  json c = {{"model_type", "bert"},
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
  KILN_CHECK(c["num_hidden_layers"].get<int64_t>() <= kGgufMaxLayers, "GGUF: 'bert.block_count' is ",
             c["num_hidden_layers"].get<int64_t>(), "; the file is likely damaged");
  if (const json pad = m.value("tokenizer.ggml.padding_token_id", json());
      pad.is_number_integer() && pad.get<int64_t>() >= 0 && pad.get<int64_t>() < c["vocab_size"].get<int64_t>())
    c["pad_token_id"] = pad;
  return c;
}

}  // namespace kiln::models
