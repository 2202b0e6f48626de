#include "models/hf/gguf_encoder_names.h"

namespace kiln::models {

namespace {

const std::vector<GgufEncoderArch>& encoder_archs() {
  static const std::vector<GgufEncoderArch> table = {
      {"bert",
       {{"token_embd.weight", "embeddings.word_embeddings.weight"},
        {"position_embd.weight", "embeddings.position_embeddings.weight"},
        {"token_types.weight", "embeddings.token_type_embeddings.weight"},
        {"token_embd_norm.weight", "embeddings.LayerNorm.weight"},
        {"token_embd_norm.bias", "embeddings.LayerNorm.bias"},
        // a reranker's head (gguf_encoder_config.cpp): RoBERTa's dense and out_proj, as BERT's pooler and classifier
        {"cls.weight", "pooler.dense.weight"},
        {"cls.bias", "pooler.dense.bias"},
        {"cls.output.weight", "classifier.weight"},
        {"cls.output.bias", "classifier.bias"}},
       "encoder.layer",
       {{"attn_q", "attention.self.query"},
        {"attn_k", "attention.self.key"},
        {"attn_v", "attention.self.value"},
        {"attn_output", "attention.output.dense"},
        {"attn_output_norm", "attention.output.LayerNorm"},
        {"ffn_up", "intermediate.dense"},
        {"ffn_down", "output.dense"},
        {"layer_output_norm", "output.LayerNorm"}}},
      // nomic-embed-text's own modeling code's names (tensor_mapping.py's "nomic-bert" rows).
      {"nomic-bert",
       {{"token_embd.weight", "embeddings.word_embeddings.weight"},
        {"token_types.weight", "embeddings.token_type_embeddings.weight"},
        {"token_embd_norm.weight", "emb_ln.weight"},
        {"token_embd_norm.bias", "emb_ln.bias"}},
       "encoder.layers",
       {{"attn_qkv", "attn.Wqkv"},
        {"attn_output", "attn.out_proj"},
        {"attn_output_norm", "norm1"},
        {"ffn_up", "mlp.fc11"},
        {"ffn_gate", "mlp.fc12"},
        {"ffn_down", "mlp.fc2"},
        {"layer_output_norm", "norm2"}}},
  };
  return table;
}

}  // namespace

const GgufEncoderArch* gguf_encoder_arch(const std::string& arch) {
  for (const GgufEncoderArch& a : encoder_archs())
    if (a.arch == arch) return &a;
  return nullptr;
}

std::string gguf_encoder_name(const GgufEncoderArch& a, const std::string& name) {
  for (const auto& [gguf, hf] : a.names)
    if (name == gguf) return hf;
  if (!name.starts_with("blk.")) return "";
  const size_t dot = name.find('.', 4), last = name.rfind('.');
  if (dot == std::string::npos || last <= dot) return "";
  const std::string layer = name.substr(4, dot - 4), part = name.substr(dot + 1, last - dot - 1);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) return "";
  for (const auto& [gguf, hf] : a.layer_names)
    if (part == gguf) return a.layers + "." + layer + "." + hf + name.substr(last);
  return "";
}

}  // namespace kiln::models
