#include "models/hf/gguf_model.h"

#include <cstring>
#include <map>
#include <regex>

#include "kiln/autograd/ops.h"
#include "kiln/core/error.h"
#include "kiln/io/gguf_quants.h"
#include "kiln/nn/init.h"
#include "kiln/text/gguf_vocab.h"
#include "models/hf/families.h"

namespace kiln::models {

using nlohmann::json;

namespace {

// A metadata value that must be there: `arch.key` (llama.block_count, ...).
const json& required(const json& m, const std::string& key) {
  KILN_CHECK(m.contains(key), "GGUF: the file lacks '", key, "', which its architecture needs");
  return m[key];
}

int64_t positive(const json& m, const std::string& key) {
  const json& v = required(m, key);
  KILN_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, "GGUF: '", key, "' is ", v.dump(), "; expected a positive integer");
  return v.get<int64_t>();
}

// The architectures Kiln reads from GGUF, as llama.cpp names them.
struct GgufArchitecture {
  const char* arch;             // general.architecture
  const char* model_type;       // the family row that builds it
  const char* hf_architecture;  // config.json's "architectures" for an export
  bool permuted_qk;             // llama.cpp's converter interleaves q and k's rotary halves (llama's files only)
};
constexpr GgufArchitecture kArchitectures[] = {
    {"llama", "llama", "LlamaForCausalLM", true},
    {"qwen3", "qwen3", "Qwen3ForCausalLM", false},
};

const GgufArchitecture& architecture_of(const json& m) {
  const json* a = m.contains("general.architecture") ? &m["general.architecture"] : nullptr;
  const std::string arch = a && a->is_string() ? a->get<std::string>() : "";
  for (const auto& row : kArchitectures)
    if (arch == row.arch) return row;
  std::string known;
  for (const auto& row : kArchitectures) known += (known.empty() ? "" : ", ") + std::string(row.arch);
  KILN_FAIL("GGUF: architecture '", arch, "' is not one Kiln loads from GGUF yet (it loads ", known, ")");
}

// GGUF's names -> transformers' (blk.N.* per layer); a name an architecture lacks is never looked up.
const std::map<std::string, std::string>& gguf_names() {
  static const std::map<std::string, std::string> names = {
      {"token_embd.weight", "model.embed_tokens.weight"},   {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},                  {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},         {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},         {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},              {"ffn_down.weight", "mlp.down_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},    {"attn_k_norm.weight", "self_attn.k_norm.weight"}};
  return names;
}

std::string hf_name_of(const std::string& gguf_name) {
  static const std::regex layer(R"(blk\.(\d+)\.(.+))");
  std::smatch m;
  const auto& names = gguf_names();
  if (std::regex_match(gguf_name, m, layer)) {
    const auto it = names.find(m[2].str());
    return it == names.end() ? "" : "model.layers." + m[1].str() + "." + it->second;
  }
  const auto it = names.find(gguf_name);
  return it == names.end() ? "" : it->second;
}

// llama.cpp's converter stores q and k with each head's rows [first half,
// second half] interleaved (row 2i + j of a head holds the half-j row i):
// for each row of transformers' order, the file's row that holds it.
std::vector<int64_t> unpermuted_rows(int64_t rows, int64_t heads) {
  const int64_t D = rows / heads;
  KILN_CHECK(rows % heads == 0 && D % 2 == 0, "GGUF: a projection of ", rows, " rows does not split into ", heads,
             " heads of even width");
  std::vector<int64_t> source(static_cast<size_t>(rows));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < D / 2; ++i)
      for (int64_t j = 0; j < 2; ++j) source[size_t(h * D + j * D / 2 + i)] = h * D + 2 * i + j;
  return source;
}

// Row r of `to` becomes row source[r] of `from` (both contiguous, of one shape and dtype).
void reorder_rows(const Tensor& from, Tensor& to, const std::vector<int64_t>& source) {
  const size_t row = size_t(from.numel() / from.size(0)) * dtype_size(from.dtype());
  const auto* in = static_cast<const uint8_t*>(from.data_ptr());
  auto* out = static_cast<uint8_t*>(to.data_ptr());
  for (size_t r = 0; r < source.size(); ++r) std::memcpy(out + r * row, in + size_t(source[r]) * row, row);
}

Tensor unpermute(const Tensor& w, int64_t heads) {
  Tensor out = Tensor::empty(w.shape(), w.dtype());
  reorder_rows(w.contiguous(), out, unpermuted_rows(w.size(0), heads));
  return out;
}

QuantizedMatrix unpermute(QuantizedMatrix q, int64_t heads) {
  const std::vector<int64_t> source = unpermuted_rows(q.rows, heads);
  for (Tensor* t : {&q.data, &q.scales}) {
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

}  // namespace

json hf_config_from_gguf(const GgufFile& file) {
  const json& m = file.metadata();
  const GgufArchitecture& row = architecture_of(m);
  const std::string p = std::string(row.arch) + ".";
  json c = {{"model_type", row.model_type},
            {"hidden_size", positive(m, p + "embedding_length")},
            {"num_hidden_layers", positive(m, p + "block_count")},
            {"intermediate_size", positive(m, p + "feed_forward_length")},
            {"num_attention_heads", positive(m, p + "attention.head_count")},
            {"max_position_embeddings", positive(m, p + "context_length")},
            {"tie_word_embeddings", file.find("output.weight") == nullptr}};
  c["num_key_value_heads"] = m.contains(p + "attention.head_count_kv") ? positive(m, p + "attention.head_count_kv")
                                                                       : c["num_attention_heads"].get<int64_t>();
  if (m.contains(p + "attention.key_length")) c["head_dim"] = positive(m, p + "attention.key_length");
  if (m.contains(p + "rope.freq_base")) c["rope_theta"] = required(m, p + "rope.freq_base");
  if (m.contains(p + "attention.layer_norm_rms_epsilon"))
    c["rms_norm_eps"] = required(m, p + "attention.layer_norm_rms_epsilon");
  const GgufTensorInfo* embedding = file.find("token_embd.weight");
  KILN_CHECK(embedding && embedding->dims.size() == 2, "GGUF: the file lacks a 2-D token_embd.weight");
  c["vocab_size"] = embedding->dims[1];
  KILN_CHECK(!m.contains(p + "rope.scaling.type") || m[p + "rope.scaling.type"] == "none",
             "GGUF: rope scaling '", m.value(p + "rope.scaling.type", json()).dump(), "' is not read from GGUF yet");
  return c;
}

std::shared_ptr<LanguageModel> load_gguf_language_model(const GgufFile& file, std::optional<DType> dtype) {
  const json config = hf_config_from_gguf(file);
  std::shared_ptr<LanguageModel> model;
  {
    nn::MetaParametersGuard meta;  // the file provides the weights: no initialisation, no memory
    model = find_causal_lm_family(config["model_type"].get<std::string>())->build(config);
  }
  // llama.cpp keeps norms in F32 beside F16/BF16 matrices; a model runs in one dtype: the embedding's, or f32
  // where the embedding is quantized (quantized products give f32).
  if (!dtype) {
    const GgufTensorInfo* embedding = file.find("token_embd.weight");
    dtype = embedding->type == GgufType::F16 ? DType::f16 : embedding->type == GgufType::BF16 ? DType::bf16 : DType::f32;
  }
  const bool permuted = architecture_of(file.metadata()).permuted_qk;
  const int64_t heads = permuted ? config["num_attention_heads"].get<int64_t>() : 0;
  const int64_t kv_heads = permuted ? config["num_key_value_heads"].get<int64_t>() : 0;
  std::map<std::string, Tensor> weights;
  std::map<std::string, QuantizedMatrix> quantized;
  for (const GgufTensorInfo& t : file.header().tensors) {
    if (t.name == "rope_freqs.weight") continue;  // llama 3's scaling factors (refused above when they matter)
    const std::string name = hf_name_of(t.name);
    KILN_CHECK(!name.empty(), "GGUF: tensor '", t.name, "' has no place in a ", config["model_type"].get<std::string>(),
               " model");
    const int64_t permuted_heads = name.ends_with("q_proj.weight") ? heads : name.ends_with("k_proj.weight") ? kv_heads : 0;
    if (gguf_maps_to_kiln_quantized(t.type) && t.dims.size() == 2) {  // kept quantized (kiln/io/gguf_quants.h)
      QuantizedMatrix q = gguf_to_quantized(t.type, file.tensor(t.name), t.dims[1], t.dims[0], *dtype);
      quantized.emplace(name, permuted_heads ? unpermute(std::move(q), permuted_heads) : std::move(q));
      continue;
    }
    const Tensor w = float_tensor(file, t);  // a view of the mapping, but for q and k and other quantized types
    weights.emplace(name, permuted_heads ? unpermute(w, permuted_heads) : w);
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
  return out;
}

HfFolderContents gguf_folder_files(const std::string& path) {
  const GgufFile file = GgufFile::open(path);
  HfFolderContents c;
  c.config = hf_config_from_gguf(file);
  c.config["architectures"] = {architecture_of(file.metadata()).hf_architecture};
  const text::GgufVocab vocab = text::gguf_vocab(file.metadata());
  const text::GgufChatTemplate chat = text::gguf_chat_template(file.metadata());
  const json& m = file.metadata();
  for (const char* key : {"bos", "eos", "pad"})
    if (const std::string k = std::string("tokenizer.ggml.") + key + "_token_id"; m.contains(k))
      c.config[std::string(key) + "_token_id"] = m[k];
  // Tokens are the file's bytes; any that are not UTF-8 are written as U+FFFD (a tokenizer.json is JSON text).
  c.tokenizer_json = vocab.tokenizer.dump(-1, ' ', false, json::error_handler_t::replace);
  const json& post = vocab.tokenizer["post_processor"]["single"];
  c.tokenizer_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                        {"add_bos_token", post.front().contains("SpecialToken")},
                        {"clean_up_tokenization_spaces", false}};
  if (!chat.bos_token.empty()) c.tokenizer_config["bos_token"] = chat.bos_token;
  if (!chat.eos_token.empty()) c.tokenizer_config["eos_token"] = chat.eos_token;
  if (!chat.source.empty()) c.tokenizer_config["chat_template"] = chat.source;
  c.generation_config = {{"eos_token_id", vocab.end_of_generation_ids}};
  if (m.contains("tokenizer.ggml.bos_token_id")) c.generation_config["bos_token_id"] = m["tokenizer.ggml.bos_token_id"];
  return c;
}

}  // namespace kiln::models
