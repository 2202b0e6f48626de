#include "models/hf/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "kiln/autograd/ops.h"
#include "kiln/core/error.h"
#include "kiln/io/gguf_quants.h"
#include "kiln/nn/init.h"
#include "kiln/text/gguf_vocab.h"
#include "models/hf/families.h"
#include "models/hf/gguf_architectures.h"
#include "models/hf/hf_chat.h"
#include "models/hf/sampling_defaults.h"

namespace kiln::models {

using nlohmann::json;

namespace {

// Row r of `to` becomes row source[r] of `from` (both contiguous, of one shape and dtype).
void reorder_rows(const Tensor& from, Tensor& to, const std::vector<int64_t>& source) {
  const size_t row = size_t(from.numel() / from.size(0)) * dtype_size(from.dtype());
  const auto* in = static_cast<const uint8_t*>(from.data_ptr());
  auto* out = static_cast<uint8_t*>(to.data_ptr());
  for (size_t r = 0; r < source.size(); ++r) std::memcpy(out + r * row, in + size_t(source[r]) * row, row);
}

Tensor unpermute(const Tensor& w, int64_t heads) {
  Tensor out = Tensor::empty(w.shape(), w.dtype());
  reorder_rows(w.contiguous(), out, gguf_qk_file_rows(w.size(0), heads));
  return out;
}

QuantizedMatrix unpermute(QuantizedMatrix q, int64_t heads) {
  const std::vector<int64_t> source = gguf_qk_file_rows(q.rows, heads);
  for (Tensor* t : {&q.data, &q.scales, &q.mins}) {
    if (!t->defined()) continue;  // a K-quant's scales are in its blocks
    Tensor reordered = Tensor::empty(t->shape(), t->dtype());
    reorder_rows(*t, reordered, source);
    *t = reordered;
  }
  return q;
}

// A tensor Kiln multiplies in float: F32/F16/BF16 as they are (views of the
// mapping), any other type dequantized to f32.
Tensor float_tensor(const GgufFile& file, const GgufTensorInfo& t) {
  if (t.type == GgufType::F32 || t.type == GgufType::F16 || t.type == GgufType::BF16) return file.tensor(t.name);
  Shape shape(t.dims.rbegin(), t.dims.rend());
  Tensor out = Tensor::empty(shape, DType::f32);
  gguf_dequantize(t.type, file.tensor(t.name).data<uint8_t>(), out.numel(), out.data<float>());
  return out;
}

// Tensors a language model does not take from its file: rope factors (read into the config), a reranker's head
// (gguf_classifier_head), an embedder's projections.
bool read_beside_the_model(const std::string& gguf_name) {
  for (const char* prefix : {"rope_freqs.", "rope_factors_", "cls.output.", "dense_2.", "dense_3."})
    if (gguf_name.starts_with(prefix)) return true;
  return false;
}

// The dtype a file's model runs in unless one is asked for: bf16 for a BF16 file, else f32 (quantized products
// give f32).
DType default_dtype(const GgufFile& file) {
  return file.find("token_embd.weight")->type == GgufType::BF16 ? DType::bf16 : DType::f32;
}

// The names of a model's linear and embedding weights: the matrices that may stay f16 or quantized.
std::set<std::string> matrix_names(LanguageModel& model) {
  std::set<std::string> matrices;
  model.for_each_module([&](const std::string& prefix, nn::Module& m) {
    if (dynamic_cast<nn::WeightModule*>(&m)) matrices.insert(prefix + "weight");
  });
  return matrices;
}

// model.layers.N.mlp.experts.gate_proj.weight -> model.layers.N.mlp.experts.E.gate_proj.weight
std::string expert_name(const std::string& name, int64_t e) {
  const size_t at = name.find(".experts.") + 9;
  return name.substr(0, at) + std::to_string(e) + "." + name.substr(at);
}

// w - offset, in f32 (Gemma's norms, stored by llama.cpp's converter as 1 + w).
Tensor minus(const Tensor& w, float offset) {
  const Tensor f = to_dtype(w.contiguous(), DType::f32);
  Tensor out = Tensor::empty(f.shape(), DType::f32);
  const float* in = f.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < f.numel(); ++i) o[i] = in[i] - offset;
  return out;
}

}  // namespace

std::shared_ptr<LanguageModel> load_gguf_language_model(const GgufFile& file, std::optional<DType> dtype) {
  const json config = hf_config_from_gguf(file);
  std::shared_ptr<LanguageModel> model;
  {
    nn::MetaParametersGuard meta;  // the file provides the weights: no initialisation, no memory
    model = find_causal_lm_family(config["model_type"].get<std::string>())->build(config);
  }
  // llama.cpp keeps norms in F32 beside F16/BF16 matrices; a model runs in one dtype: bf16 for a BF16 file, else
  // f32 (quantized products give f32). An F16 file's matrices, by default, stay f16 in that f32 model
  // (kiln/core/quantized.h's f16 format: read at 2 bytes and widened in registers, the activations f32, as
  // llama.cpp runs them); a dtype asked for (fine-tuning, export) makes them parameters of that dtype.
  const bool keep_half = !dtype;
  if (!dtype) dtype = default_dtype(file);
  const std::set<std::string> matrices = matrix_names(*model);
  const GgufArchitecture& arch = gguf_architecture(file.metadata());
  const int64_t heads = arch.permuted_qk ? config["num_attention_heads"].get<int64_t>() : 0;
  const int64_t kv_heads = arch.permuted_qk ? config["num_key_value_heads"].get<int64_t>() : 0;
  std::map<std::string, Tensor> weights;
  std::map<std::string, QuantizedMatrix> quantized;
  for (const GgufTensorInfo& t : file.header().tensors) {
    if (read_beside_the_model(t.name)) continue;
    const std::string name = gguf_hf_name(arch, t.name);
    KILN_CHECK(!name.empty(), "GGUF: tensor '", t.name, "' has no place in a ", config["model_type"].get<std::string>(),
               " model");
    const bool q = name.ends_with("q_proj.weight") || name.ends_with("q_proj.bias");
    const int64_t permuted_heads = q ? heads : name.ends_with("k_proj.weight") || name.ends_with("k_proj.bias") ? kv_heads : 0;
    // An expert tensor holds every expert of its layer ([experts, rows, cols]); each becomes its own matrix.
    const bool experts = name.find(".experts.") != std::string::npos;
    KILN_CHECK(t.dims.size() == (experts ? 3u : t.dims.size()), "GGUF: expert tensor '", t.name, "' is not 3-D");
    const int64_t count = experts ? t.dims[2] : 1, rows = t.dims.size() > 1 ? t.dims[1] : 1, cols = t.dims[0];
    auto part_name = [&](int64_t e) { return experts ? expert_name(name, e) : name; };
    if (gguf_maps_to_kiln_quantized(t.type) && t.dims.size() >= 2) {  // kept quantized (kiln/io/gguf_quants.h)
      const Tensor blocks = file.tensor(t.name);
      for (int64_t e = 0; e < count; ++e) {
        QuantizedMatrix q = gguf_to_quantized(t.type, blocks.slice(0, e * rows, (e + 1) * rows), rows, cols, *dtype);
        quantized.emplace(part_name(e), permuted_heads ? unpermute(std::move(q), permuted_heads) : std::move(q));
      }
      continue;
    }
    if (keep_half && t.type == GgufType::F16 && matrices.contains(part_name(0))) {
      const Tensor values = file.tensor(t.name).view({count * rows, cols});
      for (int64_t e = 0; e < count; ++e) {
        QuantizedMatrix q = half_matrix(values.slice(0, e * rows, (e + 1) * rows), *dtype);
        quantized.emplace(part_name(e), permuted_heads ? unpermute(std::move(q), permuted_heads) : std::move(q));
      }
      continue;
    }
    Tensor w = float_tensor(file, t);  // a view of the mapping, but for q and k and other quantized types
    if (arch.norm_offset != 0 && name.ends_with("norm.weight")) w = minus(w, arch.norm_offset);
    for (int64_t e = 0; e < count; ++e)
      weights.emplace(part_name(e), experts ? w.slice(0, e, e + 1).view({rows, cols})
                                            : permuted_heads ? unpermute(w, permuted_heads) : w);
  }
  model->for_each_module([&](const std::string& prefix, nn::Module& m) {
    auto* w = dynamic_cast<nn::WeightModule*>(&m);
    const auto it = quantized.find(prefix + "weight");
    if (!w || it == quantized.end()) return;
    w->set_quantized(std::make_shared<const QuantizedMatrix>(std::move(it->second)));
    quantized.erase(it);
  });
  KILN_CHECK(quantized.empty(), "GGUF: quantized tensor '", quantized.empty() ? "" : quantized.begin()->first,
             "' is not a matrix of a linear layer or the embedding");
  attach_mapped_weights(*model, std::move(weights), file.path(), config["model_type"].get<std::string>(), dtype);
  return model;
}

GgufWeightBytes gguf_weight_bytes(const GgufFile& file) {
  const json config = hf_config_from_gguf(file);
  std::set<std::string> matrices;
  {
    nn::MetaParametersGuard meta;
    matrices = matrix_names(*find_causal_lm_family(config["model_type"].get<std::string>())->build(config));
  }
  const GgufArchitecture& arch = gguf_architecture(file.metadata());
  GgufWeightBytes out;
  out.dtype = default_dtype(file);
  for (const GgufTensorInfo& t : file.header().tensors) {
    if (read_beside_the_model(t.name)) continue;
    const std::string name = gguf_hf_name(arch, t.name);
    const bool experts = name.find(".experts.") != std::string::npos && t.dims.size() == 3;
    const int64_t count = experts ? t.dims[2] : 1, rows = t.dims.size() > 1 ? t.dims[1] : 1, cols = t.dims[0];
    const std::optional<QuantFormat> format = t.dims.size() >= 2 ? gguf_kiln_format(t.type) : std::nullopt;
    const bool half = t.type == GgufType::F16 && matrices.contains(experts ? expert_name(name, 0) : name);
    size_t bytes = size_t(count * rows * cols) * dtype_size(out.dtype);
    if (format || half) {  // as the loader keeps them (quantized_bytes of their format, or f16)
      bytes = size_t(count) * (format ? quantized_bytes(*format, rows, cols) : size_t(rows * cols) * 2);
      out.kept += bytes;
      const std::string type = gguf_type_info(uint32_t(t.type)).name;
      if (std::find(out.kept_types.begin(), out.kept_types.end(), type) == out.kept_types.end())
        out.kept_types.push_back(type);
    }
    out.total += bytes;
  }
  return out;
}

Tensor gguf_classifier_head(const GgufFile& file) {
  const GgufTensorInfo* head = file.find("cls.output.weight");
  KILN_CHECK(head && head->dims.size() == 2, "GGUF: the reranker lacks a 2-D cls.output.weight");
  KILN_CHECK(!file.find("cls.output.bias") && !file.find("cls.weight"), "GGUF: a causal model's reranker head is ",
             "cls.output alone (Qwen3-Reranker's); this file's has a bias or a dense layer Kiln does not run");
  return gguf_f32_tensor(file, *head);
}

Tensor gguf_f32_tensor(const GgufFile& file, const GgufTensorInfo& t) {
  return to_dtype(float_tensor(file, t), DType::f32);
}

HfCausalLm load_gguf_causal_lm(const std::string& path, std::optional<DType> dtype) {
  const GgufFile file = GgufFile::open(path);
  HfCausalLm out;
  out.dir = path;
  out.config = hf_config_from_gguf(file);
  out.model_type = out.config["model_type"].get<std::string>();
  out.model = load_gguf_language_model(file, dtype);
  text::GgufVocab vocab = text::gguf_vocab(file.metadata());
  out.tokenizer = text::HfTokenizer::from_json(vocab.tokenizer, path);
  KILN_CHECK(out.tokenizer.vocab_size() <= out.model->vocab_size(), path, ": the tokenizer has ",
             out.tokenizer.vocab_size(), " tokens, more than the model's ", out.model->vocab_size(), " embeddings");
  out.eos_ids = std::move(vocab.end_of_generation_ids);
  out.sampling_defaults = gguf_sampling(file.metadata(), path);
  return out;
}

HfFolderContents gguf_folder_files(const std::string& path) {
  const GgufFile file = GgufFile::open(path);
  HfFolderContents c;
  c.config = hf_config_from_gguf(file);
  c.config["architectures"] = {gguf_architecture(file.metadata()).hf_architecture};
  const text::GgufVocab vocab = text::gguf_vocab(file.metadata());
  const text::GgufChatTemplate chat = text::gguf_chat_template(file.metadata());
  const json& m = file.metadata();
  // null where the file has none: transformers' defaults per model type (Phi-3's pad of 32000, ...) may lie
  // outside this vocabulary.
  for (const auto& [key, gguf_key] : {std::pair{"bos_token_id", "tokenizer.ggml.bos_token_id"},
                                      {"eos_token_id", "tokenizer.ggml.eos_token_id"},
                                      {"pad_token_id", "tokenizer.ggml.padding_token_id"}})
    c.config[key] = m.contains(gguf_key) ? m[gguf_key] : json();
  // Tokens are the file's bytes; any that are not UTF-8 are written as U+FFFD (a tokenizer.json is JSON text).
  c.tokenizer_json = vocab.tokenizer.dump(-1, ' ', false, json::error_handler_t::replace);
  const json& post = vocab.tokenizer["post_processor"]["single"];
  c.tokenizer_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                        {"add_bos_token", post.front().contains("SpecialToken")},
                        {"clean_up_tokenization_spaces", false}};
  if (!chat.bos_token.empty()) c.tokenizer_config["bos_token"] = chat.bos_token;
  if (!chat.eos_token.empty()) c.tokenizer_config["eos_token"] = chat.eos_token;
  if (!chat.source.empty()) c.tokenizer_config["chat_template"] = chat_templates_config(chat.source, chat.tool_use);
  c.generation_config = generation_config_of_gguf_sampling(m);
  c.generation_config["eos_token_id"] = vocab.end_of_generation_ids;
  if (m.contains("tokenizer.ggml.bos_token_id")) c.generation_config["bos_token_id"] = m["tokenizer.ggml.bos_token_id"];
  return c;
}

}  // namespace kiln::models
