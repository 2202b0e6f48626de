#include "models/hf/gguf_export.h"

#include <cstring>
#include <algorithm>
#include <map>

#include "kiln/autograd/ops.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/io/gguf_writer.h"
#include "kiln/text/gguf_vocab.h"
#include "models/hf/gguf_architectures.h"

namespace kiln::models {

using nlohmann::json;

namespace {

// The families written so far, and the architecture llama.cpp gives each.
const std::map<std::string, std::string> kExportable = {
    {"llama", "llama"}, {"mistral", "llama"}, {"qwen2", "qwen2"}, {"qwen3", "qwen3"}};

struct OutType {
  GgufType matrices;
  uint32_t file_type;  // general.file_type (llama_ftype)
};
const std::map<std::string, OutType> kOutTypes = {{"f32", {GgufType::F32, 0}},
                                                  {"f16", {GgufType::F16, 1}},
                                                  {"q8_0", {GgufType::Q8_0, 7}},
                                                  {"bf16", {GgufType::BF16, 32}}};

// llama.cpp's converter interleaves each head's rotary halves of q and k (the inverse of gguf_model.cpp's unpermute).
std::vector<float> permuted(const std::vector<float>& w, int64_t rows, int64_t heads) {
  const int64_t D = rows / heads, cols = int64_t(w.size()) / rows;
  KILN_CHECK(rows % heads == 0 && D % 2 == 0, "GGUF export: ", rows, " rows do not split into ", heads,
             " heads of even width");
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < D / 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(&out[size_t((h * D + 2 * i + j) * cols)], &w[size_t((h * D + j * D / 2 + i) * cols)],
                    size_t(cols) * sizeof(float));
  return out;
}

GgufTensorOut tensor_out(const std::string& name, const Shape& shape, const std::vector<float>& values, GgufType type) {
  GgufTensorOut t{name, std::vector<int64_t>(shape.rbegin(), shape.rend()), type, {}};
  // Vectors (norms, biases) stay F32, and Q8_0 needs whole blocks of 32 in a row (else F16, as the converter does).
  if (shape.size() < 2) t.type = GgufType::F32;
  else if (type == GgufType::Q8_0 && t.dims[0] % 32 != 0) t.type = GgufType::F16;
  const size_t n = values.size();
  switch (t.type) {
    case GgufType::F32:
      t.bytes.resize(n * 4);
      std::memcpy(t.bytes.data(), values.data(), n * 4);
      break;
    case GgufType::F16:
    case GgufType::BF16: {
      t.bytes.resize(n * 2);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = t.type == GgufType::F16 ? float_to_f16(values[i]) : float_to_bf16(values[i]);
        std::memcpy(&t.bytes[i * 2], &h, 2);
      }
      break;
    }
    default: t.bytes = quantize_q8_0(values.data(), int64_t(n));
  }
  return t;
}

double rope_theta(const json& c) {
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (c.contains(key) && c[key].is_object() && c[key].contains("rope_theta")) return c[key]["rope_theta"].get<double>();
  return c.value("rope_theta", 10000.0);
}

json rope_scaling(const json& c) {
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (c.contains(key) && c[key].is_object()) return c[key];
  return json::object();
}

// A special token's id by its text in tokenizer_config.json (a string, or an object with "content").
int64_t special_id(const json& tokenizer_config, const char* key, const json& tokenizer) {
  if (!tokenizer_config.contains(key) || tokenizer_config[key].is_null()) return -1;
  const json& v = tokenizer_config[key];
  const std::string text = v.is_string() ? v.get<std::string>() : v.value("content", "");
  for (const json& added : tokenizer.value("added_tokens", json::array()))
    if (added.value("content", "") == text) return added["id"].get<int64_t>();
  const json& vocab = tokenizer["model"]["vocab"];
  return vocab.contains(text) ? vocab[text].get<int64_t>() : -1;
}

}  // namespace

std::vector<std::string> write_gguf_model(const std::string& path, const HfFolderContents& folder,
                                          const std::string& type) {
  const json& c = folder.config;
  const std::string model_type = c.value("model_type", "");
  const auto exportable = kExportable.find(model_type);
  KILN_CHECK(exportable != kExportable.end(), "GGUF export: Kiln writes llama, mistral, qwen2 and qwen3 models as GGUF "
             "so far, not ", model_type, "; export --format hf and convert it with llama.cpp's convert_hf_to_gguf.py");
  KILN_CHECK(!c.contains("quantization_config"), "GGUF export: the model's weights are in Kiln's own quantized format; "
             "export its float source");
  const auto out_type = kOutTypes.find(type);
  KILN_CHECK(out_type != kOutTypes.end(), "GGUF export: --gguf-type takes f32, f16, bf16 or q8_0, not ", type);
  const GgufArchitecture& arch = *gguf_architecture_of_type(exportable->second);
  const std::string p = arch.arch + ".";
  const int64_t hidden = c.at("hidden_size").get<int64_t>(), heads = c.at("num_attention_heads").get<int64_t>();
  const int64_t kv_heads = c.value("num_key_value_heads", heads), head_dim = c.value("head_dim", hidden / heads);
  json m = {{"general.architecture", arch.arch},
            {"general.name", c.value("_name_or_path", model_type)},
            {"general.file_type", out_type->second.file_type},
            {p + "context_length", c.at("max_position_embeddings")},
            {p + "embedding_length", hidden},
            {p + "block_count", c.at("num_hidden_layers")},
            {p + "feed_forward_length", c.at("intermediate_size")},
            {p + "attention.head_count", heads},
            {p + "attention.head_count_kv", kv_heads},
            {p + "attention.key_length", head_dim},
            {p + "attention.value_length", head_dim},
            {p + "rope.dimension_count", head_dim},
            {p + "rope.freq_base", rope_theta(c)},
            {p + "attention.layer_norm_rms_epsilon", c.value("rms_norm_eps", 1e-6)}};
  if (out_type->second.matrices == GgufType::Q8_0) m["general.quantization_version"] = 2;
  std::vector<GgufTensorOut> tensors;
  const json rope = rope_scaling(c);
  const std::string rope_type = rope.value("rope_type", rope.value("type", "default"));
  if (rope_type == "linear") {
    m[p + "rope.scaling.type"] = "linear";
    m[p + "rope.scaling.factor"] = rope.at("factor");
  } else if (rope_type == "llama3") {  // llama.cpp's converter writes the divisors as a tensor
    const std::vector<double> d = llama3_rope_divisors(
        rope_theta(c), head_dim, rope.at("factor").get<double>(), rope.value("low_freq_factor", 1.0),
        rope.value("high_freq_factor", 4.0), rope.value("original_max_position_embeddings", 8192.0));
    tensors.push_back(tensor_out("rope_freqs.weight", {int64_t(d.size())}, {d.begin(), d.end()}, GgufType::F32));
  } else {
    KILN_CHECK(rope_type == "default", "GGUF export: RoPE '", rope_type, "' is not written to GGUF yet");
  }
  const json tokenizer = json::parse(folder.tokenizer_json);
  int64_t vocab_size = -1;
  for (const auto& [name, tensor] : folder.tensors)
    if (name == "model.embed_tokens.weight") vocab_size = tensor.size(0);
  KILN_CHECK(vocab_size > 0, "GGUF export: the model has no model.embed_tokens.weight");
  m.update(text::gguf_tokenizer_metadata(tokenizer, vocab_size));
  const json& tc = folder.tokenizer_config;
  int64_t eos = special_id(tc, "eos_token", tokenizer);
  if (eos < 0 && folder.generation_config.contains("eos_token_id")) {
    const json& e = folder.generation_config["eos_token_id"];
    eos = e.is_array() ? (e.empty() ? -1 : e[0].get<int64_t>()) : e.is_number_integer() ? e.get<int64_t>() : -1;
  }
  if (eos >= 0) m["tokenizer.ggml.eos_token_id"] = eos;
  if (const int64_t pad = special_id(tc, "pad_token", tokenizer); pad >= 0) m["tokenizer.ggml.padding_token_id"] = pad;
  if (const int64_t bos = special_id(tc, "bos_token", tokenizer); bos >= 0 && !m.contains("tokenizer.ggml.bos_token_id"))
    m["tokenizer.ggml.bos_token_id"] = bos;
  if (tc.contains("chat_template") && tc["chat_template"].is_string()) m["tokenizer.chat_template"] = tc["chat_template"];

  const bool tied = c.value("tie_word_embeddings", false);
  for (const auto& [name, tensor] : folder.tensors) {
    if (tied && name == "lm_head.weight") continue;
    const std::string gguf = gguf_name_of(arch, name);
    KILN_CHECK(!gguf.empty(), "GGUF export: tensor '", name, "' has no name in llama.cpp's ", arch.arch, " files");
    const Tensor f = to_dtype(tensor.contiguous(), DType::f32);
    std::vector<float> values = f.to_vector<float>();
    const bool q = name.find(".q_proj.") != std::string::npos, k = name.find(".k_proj.") != std::string::npos;
    if (arch.permuted_qk && (q || k)) values = permuted(values, f.size(0), q ? heads : kv_heads);
    tensors.push_back(tensor_out(gguf, f.shape(), values, out_type->second.matrices));
  }
  write_gguf(path, m, tensors);
  std::vector<std::string> notes;
  if (c.contains("sliding_window") && c["sliding_window"].is_number_integer() &&
      c["sliding_window"].get<int64_t>() < c["max_position_embeddings"].get<int64_t>())
    notes.push_back("the model's sliding window (" + c["sliding_window"].dump() + " tokens) has no place in llama.cpp's " +
                    arch.arch + " files (its converter drops it too): past that many tokens the file attends to all");
  return notes;
}

}  // namespace kiln::models
