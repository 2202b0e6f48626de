#include "models/hf/gguf_export.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>

#include "kiln/autograd/ops.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/io/gguf_writer.h"
#include "kiln/text/gguf_vocab.h"
#include "models/hf/families.h"
#include "models/hf/gguf_architectures.h"
#include "models/hf/sampling_defaults.h"

namespace kiln::models {

using nlohmann::json;

namespace {

struct OutType {
  GgufType matrices;
  uint32_t file_type;  // general.file_type (llama_ftype)
};
const std::map<std::string, OutType> kOutTypes = {{"f32", {GgufType::F32, 0}},
                                                  {"f16", {GgufType::F16, 1}},
                                                  {"q8_0", {GgufType::Q8_0, 7}},
                                                  {"bf16", {GgufType::BF16, 32}}};

// q and k as llama.cpp's converter permutes them (gguf_qk_file_rows: transformers' row r goes to the file's).
std::vector<float> permuted(const std::vector<float>& w, int64_t rows, int64_t heads) {
  const std::vector<int64_t> file_row = gguf_qk_file_rows(rows, heads);
  const size_t cols = w.size() / size_t(rows);
  std::vector<float> out(w.size());
  for (size_t r = 0; r < file_row.size(); ++r)
    std::memcpy(&out[size_t(file_row[r]) * cols], &w[r * cols], cols * sizeof(float));
  return out;
}

GgufTensorOut tensor_out(const std::string& name, const Shape& shape, const std::vector<float>& values, GgufType type) {
  GgufTensorOut t{name, std::vector<int64_t>(shape.rbegin(), shape.rend()), type, {}};
  // Vectors (norms, biases), the experts' routers and the position and token-type embeddings stay F32, as the
  // converter and llama-quantize write them; Q8_0 needs whole blocks of 32 in a row (else F16).
  if (shape.size() < 2 || name.ends_with("ffn_gate_inp.weight") || name == "position_embd.weight" ||
      name == "token_types.weight")
    t.type = GgufType::F32;
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

// The checkpoint's names as Kiln's modules name them (Mixtral's files keep
// the hub's block_sparse_moe, each expert's projections as w1, w2 and w3:
// models/hf/families.cpp).
std::string kiln_name(const std::string& name) {
  const size_t moe = name.find(".block_sparse_moe.");
  if (moe == std::string::npos) return name;
  std::string out = name.substr(0, moe) + ".mlp." + name.substr(moe + 18);
  static const std::pair<std::string, std::string> projections[] = {
      {".w1.weight", ".gate_proj.weight"}, {".w2.weight", ".down_proj.weight"}, {".w3.weight", ".up_proj.weight"}};
  for (const auto& [from, to] : projections)
    if (out.ends_with(from)) return out.substr(0, out.size() - from.size()) + to;
  return out;
}

GgufTensorOut vector_out(const std::string& name, const std::vector<double>& v) {
  return tensor_out(name, {int64_t(v.size())}, std::vector<float>(v.begin(), v.end()), GgufType::F32);
}

// RoPE scaling as llama.cpp's files state it: linear and YaRN as keys, Llama
// 3.1's as each frequency's divisor (rope_freqs.weight), LongRoPE's two
// factor sets as tensors (Phi-3).
void write_rope(const LlamaConfig& L, const std::string& p, json& m, std::vector<GgufTensorOut>& tensors) {
  const RopeScaling& s = L.rope_scaling;
  if (s.type == "linear") {
    m[p + "rope.scaling.type"] = "linear";
    m[p + "rope.scaling.factor"] = s.factor;
  } else if (s.type == "llama3") {
    tensors.push_back(vector_out("rope_freqs.weight", llama3_rope_divisors(L.rope_theta, L.rotated_dims(), s.factor,
                                                                             s.low_freq_factor, s.high_freq_factor,
                                                                             double(s.original_max_positions))));
  } else if (s.type == "longrope") {
    tensors.push_back(vector_out("rope_factors_short.weight", s.short_factor));
    tensors.push_back(vector_out("rope_factors_long.weight", s.long_factor));
    m[p + "rope.scaling.original_context_length"] = s.original_max_positions;
    // (llama.cpp's converter writes transformers' attention factor, from the context's growth unless given)
    m[p + "rope.scaling.attn_factor"] =
        s.attention_factor ? *s.attention_factor
        : s.factor <= 1    ? 1.0
                           : std::sqrt(1 + std::log(s.factor) / std::log(double(s.original_max_positions)));
  } else if (s.type == "yarn") {
    // llama.cpp's YaRN truncates the ramp's ends and scales cos and sin by
    // 0.1 ln(factor) + 1 (transformers' default) times rope.scaling.attn_factor.
    KILN_CHECK(s.truncate, "GGUF export: YaRN with truncate: false (gpt-oss's) cannot be written; llama.cpp always "
               "rounds the ramp's ends");
    KILN_CHECK(s.mscale == 0 && s.mscale_all_dim == 0, "GGUF export: YaRN with mscale/mscale_all_dim (DeepSeek's) "
               "is not written to GGUF yet");
    m[p + "rope.scaling.type"] = "yarn";
    m[p + "rope.scaling.factor"] = s.factor;
    m[p + "rope.scaling.original_context_length"] = s.original_max_positions;
    m[p + "rope.scaling.yarn_beta_fast"] = s.beta_fast;
    m[p + "rope.scaling.yarn_beta_slow"] = s.beta_slow;
    if (s.attention_factor) m[p + "rope.scaling.attn_factor"] = *s.attention_factor / yarn_mscale(s.factor, 1);
  } else {
    KILN_CHECK(s.type == "default", "GGUF export: RoPE '", s.type, "' is not written to GGUF yet");
  }
}

// GPT-2's config (n_embd, ...) in the fields the writer reads: a 4 x n_embd MLP, LayerNorm's epsilon, tied.
LlamaConfig gpt2_as_llama(const json& c) {
  LlamaConfig L;
  L.hidden_size = c.at("n_embd").get<int64_t>();
  L.num_layers = c.at("n_layer").get<int64_t>();
  L.num_heads = L.num_kv_heads = c.at("n_head").get<int64_t>();
  L.max_positions = c.at("n_positions").get<int64_t>();
  L.intermediate_size = c.value("n_inner", json()).is_number_integer() ? c["n_inner"].get<int64_t>() : 4 * L.hidden_size;
  L.rms_norm_eps = c.value("layer_norm_epsilon", 1e-5);
  L.tie_word_embeddings = c.value("tie_word_embeddings", true);
  return L;
}

// tokenizer_config.json's "chat_template" as llama.cpp's converter writes it
// (gguf-py's add_chat_template): the text, or a list's "default" as
// tokenizer.chat_template and each other template as
// tokenizer.chat_template.NAME, named in tokenizer.chat_templates.
void write_chat_templates(const json& templates, json& m) {
  if (templates.is_string()) m["tokenizer.chat_template"] = templates;
  if (!templates.is_array()) return;
  json names = json::array();
  for (const json& t : templates) {
    if (!t.is_object() || !t.contains("template") || !t["template"].is_string()) continue;
    std::string name = t.value("name", "");
    for (char& c : name)  // (gguf-py's: letters, digits and _ alone)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    if (name.empty()) continue;
    m[name == "default" ? std::string("tokenizer.chat_template") : "tokenizer.chat_template." + name] = t["template"];
    if (name != "default") names.push_back(name);
  }
  if (!names.empty()) m["tokenizer.chat_templates"] = names;
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
                                          const std::string& type, const std::string& name) {
  const json& c = folder.config;
  const std::string model_type = c.value("model_type", "");
  const GgufArchitecture* row = gguf_architecture_of_type(model_type == "mistral" ? "llama" : model_type);
  KILN_CHECK(row, "GGUF export: Kiln writes the families it reads from GGUF (", gguf_exportable_types(), "), not ",
             model_type, "; export --format hf and convert it with llama.cpp's convert_hf_to_gguf.py");
  const GgufArchitecture& arch = *row;
  KILN_CHECK(!c.contains("quantization_config"), "GGUF export: the model's weights are in Kiln's own quantized format; "
             "export its float source");
  const auto out_type = kOutTypes.find(type);
  KILN_CHECK(out_type != kOutTypes.end(), "GGUF export: --gguf-type takes f32, f16, bf16 or q8_0, not ", type);
  const std::string p = arch.arch + ".";
  json m = {{"general.architecture", arch.arch}, {"general.name", name}, {"general.file_type", out_type->second.file_type}};
  if (out_type->second.matrices == GgufType::Q8_0) m["general.quantization_version"] = 2;
  std::vector<GgufTensorOut> tensors;
  std::vector<std::string> notes;
  const bool gpt2 = model_type == "gpt2";  // GPT-2's config has keys of its own; every other family is Llama-like
  const LlamaConfig L = gpt2 ? gpt2_as_llama(c) : read_llama_config(c, model_type);
  m.update(json{{p + "context_length", L.max_positions},
                {p + "embedding_length", L.hidden_size},
                {p + "block_count", L.num_layers},
                {p + "feed_forward_length", L.intermediate_size},
                {p + "attention.head_count", L.num_heads},
                {p + "attention.head_count_kv", L.num_kv_heads}});
  if (gpt2) {
    m[p + "attention.layer_norm_epsilon"] = L.rms_norm_eps;
  } else {
    m.update(json{{p + "attention.key_length", L.head_dim},
                  {p + "attention.value_length", L.head_dim},
                  {p + "rope.dimension_count", L.rotated_dims()},
                  {p + "rope.freq_base", L.rope_theta},
                  {p + "attention.layer_norm_rms_epsilon", L.rms_norm_eps}});
    write_rope(L, p, m, tensors);
  }
  if (arch.write_config) arch.write_config(L, p, m);
  if (L.sliding_window > 0 && L.sliding_window < L.max_positions && !m.contains(p + "attention.sliding_window"))
    notes.push_back("the model's sliding window (" + std::to_string(L.sliding_window) + " tokens) has no place in "
                    "llama.cpp's " + arch.arch + " files (its converter drops it too): past that many tokens the "
                    "file attends to all");
  const json tokenizer = json::parse(folder.tokenizer_json);
  int64_t vocab_size = -1;
  for (const auto& [name, tensor] : folder.tensors)
    if (gguf_name_of(arch, name) == "token_embd.weight") vocab_size = tensor.size(0);
  KILN_CHECK(vocab_size > 0, "GGUF export: the model has no token embedding");
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
  write_chat_templates(tc.contains("chat_template") ? tc["chat_template"] : json(), m);
  // The model's sampling defaults, as llama.cpp's converter keeps them.
  m.update(gguf_sampling_metadata(folder.generation_config));

  const CausalLmFamily& family = *find_causal_lm_family(model_type);
  // Each layer's experts go into one tensor per projection, [experts, rows, cols] (blk.N.ffn_*_exps).
  std::map<std::string, std::vector<std::pair<int64_t, Tensor>>> experts;
  for (const auto& [checkpoint_name, tensor] : folder.tensors) {
    const std::string name = kiln_name(checkpoint_name);
    if (L.tie_word_embeddings && name == "lm_head.weight") continue;
    if (const size_t at = name.find(".experts."); at != std::string::npos) {
      const size_t end = name.find('.', at + 9);
      experts[name.substr(0, at + 9) + name.substr(end + 1)].emplace_back(std::stoll(name.substr(at + 9, end - at - 9)),
                                                                          tensor);
      continue;
    }
    const std::string gguf = gguf_name_of(arch, name);
    KILN_CHECK(!gguf.empty(), "GGUF export: tensor '", name, "' has no name in llama.cpp's ", arch.arch, " files");
    // GPT-2's checkpoint keeps its Conv1D layers [in, out]; GGUF holds every matrix [out, in].
    const bool transposed = family.checkpoint_name(name).transposed;
    const Tensor f = to_dtype((transposed ? tensor.transpose(0, 1) : tensor).contiguous(), DType::f32);
    std::vector<float> values = f.to_vector<float>();
    const bool q = name.find(".q_proj.") != std::string::npos, k = name.find(".k_proj.") != std::string::npos;
    if (arch.permuted_qk && (q || k)) values = permuted(values, f.size(0), q ? L.num_heads : L.num_kv_heads);
    if (arch.norm_offset != 0 && name.ends_with("norm.weight"))
      for (float& v : values) v += arch.norm_offset;
    tensors.push_back(tensor_out(gguf, f.shape(), values, out_type->second.matrices));
  }
  for (auto& [name, parts] : experts) {
    std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    KILN_CHECK(int64_t(parts.size()) == L.num_experts && parts.back().first == L.num_experts - 1,
               "GGUF export: ", name, " has ", parts.size(), " experts of ", L.num_experts);
    const std::string gguf = gguf_name_of(arch, name);
    KILN_CHECK(!gguf.empty(), "GGUF export: tensor '", name, "' has no name in llama.cpp's ", arch.arch, " files");
    std::vector<float> values;
    for (const auto& [e, t] : parts) {
      const std::vector<float> part = to_dtype(t.contiguous(), DType::f32).to_vector<float>();
      values.insert(values.end(), part.begin(), part.end());
    }
    const Shape shape = {L.num_experts, parts[0].second.size(0), parts[0].second.size(1)};
    tensors.push_back(tensor_out(gguf, shape, values, out_type->second.matrices));
  }
  write_gguf(path, m, tensors);
  return notes;
}

}  // namespace kiln::models
