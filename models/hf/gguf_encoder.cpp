#include "models/hf/gguf_encoder.h"

#include <utility>

#include "kiln/autograd/ops.h"
#include "kiln/core/error.h"
#include "kiln/io/gguf_quants.h"

namespace kiln::models {
namespace {

using nlohmann::json;

// llama.cpp's names for BERT's tensors and transformers' BertModel's (a layer's with blk.N. left off).
const std::pair<const char*, const char*> kNames[] = {
    {"token_embd.weight", "embeddings.word_embeddings.weight"},
    {"position_embd.weight", "embeddings.position_embeddings.weight"},
    {"token_types.weight", "embeddings.token_type_embeddings.weight"},
    {"token_embd_norm.weight", "embeddings.LayerNorm.weight"},
    {"token_embd_norm.bias", "embeddings.LayerNorm.bias"},
};
const std::pair<const char*, const char*> kLayerNames[] = {
    {"attn_q", "attention.self.query"},
    {"attn_k", "attention.self.key"},
    {"attn_v", "attention.self.value"},
    {"attn_output", "attention.output.dense"},
    {"attn_output_norm", "attention.output.LayerNorm"},
    {"ffn_up", "intermediate.dense"},
    {"ffn_down", "output.dense"},
    {"layer_output_norm", "output.LayerNorm"},
};

// transformers' name of a tensor of the file, or "" for none.
std::string bert_name(const std::string& name) {
  for (const auto& [gguf, hf] : kNames)
    if (name == gguf) return hf;
  if (!name.starts_with("blk.")) return "";
  const size_t dot = name.find('.', 4), last = name.rfind('.');
  if (dot == std::string::npos || last <= dot) return "";
  const std::string layer = name.substr(4, dot - 4), part = name.substr(dot + 1, last - dot - 1);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) return "";
  for (const auto& [gguf, hf] : kLayerNames)
    if (part == gguf) return "encoder.layer." + layer + "." + hf + name.substr(last);
  return "";
}

}  // namespace

std::map<std::string, Tensor> gguf_encoder_weights(const GgufFile& file) {
  std::map<std::string, Tensor> weights;
  for (const GgufTensorInfo& t : file.header().tensors) {
    const std::string name = bert_name(t.name);
    KILN_CHECK(!name.empty(), "GGUF: tensor '", t.name,
               "' has no place in a BERT encoder (fused attn_qkv, as "
               "nomic-bert and jina-bert write, is not read yet)");
    if (t.type == GgufType::F32) {
      weights.emplace(name, file.tensor(t.name));
      continue;
    }
    if (t.type == GgufType::F16 || t.type == GgufType::BF16) {  // the converter mixes them with F32 norms
      weights.emplace(name, to_dtype(file.tensor(t.name), DType::f32));
      continue;
    }
    Tensor out = Tensor::empty(Shape(t.dims.rbegin(), t.dims.rend()), DType::f32);
    gguf_dequantize(t.type, file.tensor(t.name).data<uint8_t>(), out.numel(), out.data<float>());
    weights.emplace(name, std::move(out));
  }
  return weights;
}

}  // namespace kiln::models
