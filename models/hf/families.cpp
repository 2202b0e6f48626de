// The table of architectures. Each reads its config.json through a
// ConfigReader, which refuses by name any key whose value changes the math
// in a way Kiln does not implement.
#include "models/hf/families.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "kiln/core/error.h"
#include "kiln/nn/init.h"
#include "models/bert/bert.h"
#include "models/bert/modernbert.h"
#include "models/bert/nomic_bert.h"
#include "models/gpt/gpt.h"
#include "models/llama/llama.h"

namespace kiln::models {
namespace {

using nlohmann::json;

class ConfigReader {
 public:
  ConfigReader(const json& j, std::string type) : j_(j), type_(std::move(type)) {}
  bool has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
  const json& at(const std::string& key) const { return j_[key]; }

  // A positive integer no larger than any real model's (so a hostile
  // config cannot make Kiln build millions of layers or allocate terabytes).
  int64_t integer(const std::string& key) const {
    const int64_t most = limit_of(key);
    if (!has(key) || !j_[key].is_number_integer() || j_[key].get<int64_t>() <= 0 || j_[key].get<int64_t>() > most)
      fail(key, has(key) ? j_[key].dump() : "missing", "a positive integer up to " + std::to_string(most));
    return j_[key].get<int64_t>();
  }
  int64_t integer(const std::string& key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_number()) fail(key, j_[key].dump(), "a number");
    return j_[key].get<double>();
  }
  // A dropout probability (transformers' default when absent).
  double probability(const std::string& key, double fallback) const {
    const double p = number(key, fallback);
    if (!(p >= 0 && p < 1)) fail(key, j_[key].dump(), "a dropout probability in [0, 1)");
    return p;
  }
  bool flag(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) fail(key, j_[key].dump(), "true or false");
    return j_[key].get<bool>();
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_string()) fail(key, j_[key].dump(), "a string");
    return j_[key].get<std::string>();
  }
  // The key, when present, must hold one of `supported`.
  void only(const std::string& key, const std::vector<json>& supported) const {
    if (!has(key)) return;
    for (const auto& v : supported)
      if (j_[key] == v) return;
    std::string list;
    for (const auto& v : supported) list += (list.empty() ? "" : ", ") + v.dump();
    unsupported(key, j_[key].dump(), "Kiln implements " + list);
  }
  void absent(const std::string& key, const std::string& why) const {
    if (has(key)) unsupported(key, j_[key].dump().substr(0, 200), why);
  }
  [[noreturn]] void fail(const std::string& key, const std::string& value, const std::string& expected) const {
    KILN_FAIL("config.json (", type_, "): \"", key, "\" is ", value, "; expected ", expected);
  }
  [[noreturn]] void unsupported(const std::string& key, const std::string& value, const std::string& why) const {
    KILN_FAIL("config.json (", type_, "): \"", key, "\" = ", value,
              " changes the model's math in a way Kiln does not support (", why, ")");
  }

 private:
  static int64_t limit_of(const std::string& key) {
    static const std::map<std::string, int64_t> limits = {
        {"num_hidden_layers", 1024}, {"n_layer", 1024},   {"n_layers", 1024},        {"num_attention_heads", 1024},
        {"n_head", 1024},            {"n_heads", 1024},   {"num_key_value_heads", 1024}, {"head_dim", 1024},
        {"n_positions", 65536},      {"type_vocab_size", 1024}};
    auto it = limits.find(key);
    return it == limits.end() ? int64_t(1) << 22 : it->second;  // widths, vocabularies, contexts
  }
  const json& j_;
  std::string type_;
};

// pad_token_id, which transformers makes its embeddings' padding_idx (that
// row gets no gradient); a list, as some configs hold for eos, never is one.
std::optional<int64_t> read_pad_token_id(const ConfigReader& r, int64_t vocab_size) {
  if (!r.has("pad_token_id") || !r.at("pad_token_id").is_number_integer()) return std::nullopt;
  const int64_t pad = r.at("pad_token_id").get<int64_t>();
  if (pad < 0 || pad >= vocab_size) r.fail("pad_token_id", r.at("pad_token_id").dump(), "a token id below vocab_size");
  return pad;
}

// Keys every family refuses: weights Kiln cannot read as they are. Kiln's
// own quantized exports (quant_method "kiln", kiln export --quantize) load.
void refuse_common(const ConfigReader& r) {
  if (r.has("quantization_config") && r.at("quantization_config").is_object() &&
      r.at("quantization_config").value("quant_method", json()) == "kiln") {
    const json& q = r.at("quantization_config");
    KILN_CHECK(q.contains("format") && q["format"].is_string() && q.value("group_size", json()) == kQuantBlock,
               "config.json: quantization_config of quant_method \"kiln\" needs a \"format\" string and "
               "\"group_size\": ", kQuantBlock);
    parse_quant_format(q["format"].get<std::string>());
    return;
  }
  r.absent("quantization_config", "only Kiln's own quantized exports (quant_method \"kiln\") load; GPTQ, AWQ and "
           "bitsandbytes checkpoints do not: load the bf16 or f32 weights and pass --quantize");
}

// ---- the Llama family: llama, mistral, qwen2, qwen3, olmo2, granite, smollm3, phi3, gemma, gemma2, gemma3_text,
// mixtral, qwen3_moe, olmoe

// partial_rotary_factor (Phi-3's family; transformers 5 keeps it in
// rope_parameters): the first head_dim * factor dims of each head rotate.
void read_partial_rotary(const ConfigReader& r, const std::string& type, LlamaConfig& c) {
  if (!r.has("partial_rotary_factor")) return;
  const double factor = r.number("partial_rotary_factor", 1);
  if (factor == 1) return;
  if (type != "phi3") r.unsupported("partial_rotary_factor", r.at("partial_rotary_factor").dump(), "phi3 only");
  const int64_t dims = int64_t(double(c.head_dim) * factor);
  if (!(factor > 0 && factor < 1) || dims < 2 || dims % 2 != 0)
    r.fail("partial_rotary_factor", r.at("partial_rotary_factor").dump(),
           "a factor in (0, 1] that leaves an even number of rotated dims per head");
  c.rotary_dim = dims;
}

// SmolLM3's no_rope_layers (1: the layer rotates), or transformers' default
// without it: every no_rope_layer_interval-th layer unrotated.
void read_rope_layers(const ConfigReader& r, LlamaConfig& c) {
  if (!r.has("no_rope_layers")) {
    const int64_t interval = r.integer("no_rope_layer_interval", 4);
    for (int64_t i = 0; i < c.num_layers; ++i) c.rope_layers.push_back((i + 1) % interval != 0);
    return;
  }
  const json& layers = r.at("no_rope_layers");
  if (!layers.is_array() || int64_t(layers.size()) != c.num_layers)
    r.fail("no_rope_layers", layers.dump().substr(0, 200), "one 0 or 1 per layer (1: the layer rotates)");
  for (const json& rotates : layers) {
    if (rotates != 0 && rotates != 1) r.fail("no_rope_layers", layers.dump().substr(0, 200), "0s and 1s");
    c.rope_layers.push_back(rotates == 1);
  }
}

// rope_parameters (transformers 5) or rope_scaling (older files), as
// transformers' ROPE_INIT_FUNCTIONS read them (models/llama/rope.h).
void read_rope(const ConfigReader& r, const std::string& type, LlamaConfig& c) {
  c.rope_theta = r.number("rope_theta", c.rope_theta);
  read_partial_rotary(r, type, c);
  json rope = r.has("rope_parameters") ? r.at("rope_parameters") : r.has("rope_scaling") ? r.at("rope_scaling") : json();
  if (rope.is_null()) return;
  const std::string key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (!rope.is_object()) r.fail(key, rope.dump(), "an object");
  ConfigReader p(rope, key);
  c.rope_theta = p.number("rope_theta", c.rope_theta);
  read_partial_rotary(p, type, c);
  RopeScaling& s = c.rope_scaling;
  s.type = p.text("rope_type", p.text("type", "default"));
  if (s.type == "default") return;
  const std::vector<std::string> types = {"llama3", "linear", "dynamic", "yarn", "longrope"};
  if (std::find(types.begin(), types.end(), s.type) == types.end())
    p.unsupported("rope_type", "\"" + s.type + "\"",
                  "Kiln implements default, llama3, linear, dynamic, yarn and longrope");
  // Phi-3 keeps the original context beside rope_scaling, at the top level.
  s.original_max_positions = p.integer("original_max_position_embeddings",
                                       r.integer("original_max_position_embeddings", c.max_positions));
  const double grown = double(c.max_positions) / double(s.original_max_positions);
  s.factor = p.number("factor", s.type == "yarn" || s.type == "longrope" ? grown : 0);
  if (!(s.factor > 0)) p.fail("factor", p.has("factor") ? p.at("factor").dump() : "missing", "a positive number");
  if (s.type == "llama3") {
    s.low_freq_factor = p.number("low_freq_factor", 0);
    s.high_freq_factor = p.number("high_freq_factor", 0);
    if (!(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor))
      p.fail("high_freq_factor", rope.dump().substr(0, 200), "0 < low_freq_factor < high_freq_factor");
  }
  if (p.has("attention_factor")) s.attention_factor = p.number("attention_factor", 1);
  if (s.type == "yarn") {
    s.beta_fast = p.number("beta_fast", 32);
    s.beta_slow = p.number("beta_slow", 1);
    s.truncate = p.flag("truncate", true);
    s.mscale = p.number("mscale", 0);
    s.mscale_all_dim = p.number("mscale_all_dim", 0);
  }
  if (s.type == "longrope") {
    auto factors = [&](const char* name) {
      const int64_t n = c.rotated_dims() / 2;
      if (!p.has(name) || !p.at(name).is_array() || int64_t(p.at(name).size()) != n)
        p.fail(name, p.has(name) ? p.at(name).dump().substr(0, 200) : "missing",
               std::to_string(n) + " positive numbers, one per rotary frequency (rotated dims / 2)");
      std::vector<double> out;
      for (const json& v : p.at(name)) {
        if (!v.is_number() || !(v.get<double>() > 0)) p.fail(name, v.dump(), "positive numbers");
        out.push_back(v.get<double>());
      }
      return out;
    };
    s.short_factor = factors("short_factor");
    s.long_factor = factors("long_factor");
  }
}

// layer_types (each "sliding_attention" or "full_attention"), or the
// family's pattern where a config predates the key: whether each layer slides.
std::vector<bool> read_sliding_layers(const ConfigReader& r, int64_t layers, const std::function<bool(int64_t)>& slides) {
  std::vector<bool> out;
  if (!r.has("layer_types")) {
    for (int64_t i = 0; i < layers; ++i) out.push_back(slides(i));
    return out;
  }
  const json& types = r.at("layer_types");
  if (!types.is_array() || int64_t(types.size()) != layers)
    r.fail("layer_types", types.dump().substr(0, 200), "one entry per layer");
  for (const json& t : types) {
    if (t != "sliding_attention" && t != "full_attention")
      r.unsupported("layer_types", t.dump(), "Kiln implements sliding_attention and full_attention");
    out.push_back(t == "sliding_attention");
  }
  return out;
}

bool is_gemma(const std::string& type) { return type == "gemma" || type == "gemma2" || type == "gemma3_text"; }

// Gemma 3 keeps a RoPE per layer type (rope_parameters' full_attention and
// sliding_attention); the global one reads as every other family's.
json with_global_rope(const json& file) {
  json j = file;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
      j["rope_parameters"].contains("full_attention"))
    j["rope_parameters"] = j["rope_parameters"]["full_attention"];
  return j;
}

// A soft cap: absent, transformers' default for the family; null, none.
double read_softcap(const ConfigReader& r, const json& file, const std::string& key, double absent) {
  if (!file.contains(key)) return absent;
  const double cap = r.number(key, 0);
  if (cap < 0) r.fail(key, file[key].dump(), "a positive number, or null for none");
  return cap;
}

// Gemma 1, 2 and 3: norms of 1 + w, GeGLU, the embedding times sqrt(hidden);
// Gemma 2 and 3 add norms after each sub-layer, query_pre_attn_scalar, soft
// caps (2) and sliding layers between global ones (3: with their own RoPE base).
void read_gemma(const ConfigReader& r, const json& file, const std::string& type, LlamaConfig& c) {
  c.norm_plus_one = true;
  c.activation = LlamaConfig::Activation::gelu_tanh;
  c.embedding_multiplier = std::sqrt(double(c.hidden_size));
  c.round_embedding_multiplier = true;
  c.tie_word_embeddings = r.flag("tie_word_embeddings", true);
  if (type == "gemma") {  // transformers reads hidden_act, and takes Gemma's legacy "gelu" as the tanh approximation
    r.only("hidden_act", {"gelu_pytorch_tanh", "gelu"});
    return;
  }
  r.only("hidden_activation", {"gelu_pytorch_tanh"});
  if (type == "gemma3_text")
    c.bidirectional = r.flag("use_bidirectional_attention", false);  // EmbeddingGemma
  else
    r.only("use_bidirectional_attention", {false});
  c.norm_after = true;
  const double scalar = r.number("query_pre_attn_scalar", 256);
  if (!(scalar > 0)) r.fail("query_pre_attn_scalar", file["query_pre_attn_scalar"].dump(), "a positive number");
  c.attention_multiplier = 1 / std::sqrt(scalar);
  c.attention_softcap = read_softcap(r, file, "attn_logit_softcapping", type == "gemma2" ? 50 : 0);
  c.final_softcap = read_softcap(r, file, "final_logit_softcapping", type == "gemma2" ? 30 : 0);
  c.sliding_window = r.integer("sliding_window", 4096);
  const int64_t pattern = type == "gemma2" ? 2 : r.integer("sliding_window_pattern", 6);
  c.sliding_layers = read_sliding_layers(r, c.num_layers, [pattern](int64_t i) { return (i + 1) % pattern != 0; });
  if (type != "gemma3_text") return;
  c.qk_norm = LlamaConfig::QkNorm::per_head;
  c.local_rope_theta = r.number("rope_local_base_freq", 10000);
  if (file.contains("rope_parameters") && file["rope_parameters"].is_object() &&
      file["rope_parameters"].contains("sliding_attention")) {
    ConfigReader local(file["rope_parameters"]["sliding_attention"], "rope_parameters.sliding_attention");
    local.only("rope_type", {"default"});
    c.local_rope_theta = local.number("rope_theta", c.local_rope_theta);
  }
  if (!(c.local_rope_theta > 0)) r.fail("rope_local_base_freq", std::to_string(c.local_rope_theta), "a positive number");
}

bool is_moe(const std::string& type) { return type == "mixtral" || type == "qwen3_moe" || type == "olmoe"; }

// Mixtral, Qwen3-MoE and OLMoE: which layers route to experts, how many and
// how wide, and how the chosen probabilities are normalised.
void read_moe(const ConfigReader& r, const std::string& type, LlamaConfig& c) {
  c.num_experts = r.integer(r.has("num_experts") ? "num_experts" : "num_local_experts");  // (transformers' alias)
  c.experts_per_token = r.integer("num_experts_per_tok");
  if (c.experts_per_token > c.num_experts)
    r.fail("num_experts_per_tok", std::to_string(c.experts_per_token), "at most the number of experts");
  c.expert_intermediate_size = type == "qwen3_moe" ? r.integer("moe_intermediate_size") : c.intermediate_size;
  c.normalize_top_k = type == "mixtral" || r.flag("norm_topk_prob", false);
  if (r.flag("output_router_logits", false))
    c.router_aux_loss_coef = r.number("router_aux_loss_coef", type == "olmoe" ? 0.01 : 0.001);
  if (r.number("router_jitter_noise", 0) != 0)
    r.unsupported("router_jitter_noise", r.at("router_jitter_noise").dump(), "the routers' inputs are not jittered");
  r.absent("clip_qkv", "OLMoE's clamp of q, k and v is not implemented");
  if (type != "qwen3_moe") return;
  // Qwen3-MoE: dense MLPs (intermediate_size wide) in mlp_only_layers and off every decoder_sparse_step-th layer.
  const int64_t step = r.integer("decoder_sparse_step", 1);
  std::vector<bool> dense(size_t(c.num_layers), false);
  if (r.has("mlp_only_layers")) {
    const json& only = r.at("mlp_only_layers");
    if (!only.is_array()) r.fail("mlp_only_layers", only.dump().substr(0, 200), "a list of layer indices");
    for (const json& i : only) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= c.num_layers)
        r.fail("mlp_only_layers", only.dump().substr(0, 200), "layer indices below num_hidden_layers");
      dense[size_t(i.get<int64_t>())] = true;
    }
  }
  for (int64_t i = 0; i < c.num_layers; ++i) c.moe_layers.push_back(!dense[size_t(i)] && (i + 1) % step == 0);
}

}  // namespace

LlamaConfig read_llama_config(const json& file, const std::string& type) {
  const json j = type == "gemma3_text" ? with_global_rope(file) : file;
  ConfigReader r(j, type);
  refuse_common(r);
  if (!is_gemma(type)) r.only("hidden_act", {"silu"});
  LlamaConfig c;
  if (type == "gemma3_text") c.rope_theta = 1e6;  // transformers' default for its global layers
  c.attention_dropout = r.probability("attention_dropout", 0);
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_layers = r.integer("num_hidden_layers");
  c.num_heads = r.integer("num_attention_heads");
  c.num_kv_heads = r.integer("num_key_value_heads", c.num_heads);
  c.head_dim = r.integer("head_dim", c.hidden_size / c.num_heads);
  if (c.head_dim > 1024) r.fail("hidden_size", j["hidden_size"].dump(), "a head size (hidden_size / heads) up to 1024");
  c.max_positions = r.integer("max_position_embeddings");
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = r.flag("tie_word_embeddings", false);
  c.pad_token_id = read_pad_token_id(r, c.vocab_size);
  c.attention_bias = r.flag("attention_bias", false);
  c.mlp_bias = r.flag("mlp_bias", false);
  read_rope(r, type, c);
  if (type == "qwen2") c.qkv_bias = true;
  if (type == "qwen2" || type == "qwen3" || type == "smollm3" || type == "qwen3_moe")
    if (r.flag("use_sliding_window", false))
      r.unsupported("use_sliding_window", "true", "per-layer sliding windows are not implemented for " + type);
  if (type == "qwen3" || type == "qwen3_moe") c.qk_norm = LlamaConfig::QkNorm::per_head;
  if (type == "olmo2") c.qk_norm = LlamaConfig::QkNorm::whole, c.norm_after = true, c.norm_before = false;
  if (type == "olmoe") c.qk_norm = LlamaConfig::QkNorm::whole;
  if (is_moe(type)) read_moe(r, type, c);
  if (type == "granite") {
    c.embedding_multiplier = r.number("embedding_multiplier", 1);
    c.attention_multiplier = r.number("attention_multiplier", 1);
    c.residual_multiplier = r.number("residual_multiplier", 1);
    c.logits_scaling = r.number("logits_scaling", 1);
    if (!(c.attention_multiplier > 0))
      r.fail("attention_multiplier", j["attention_multiplier"].dump(), "a positive number");
    if (!(c.logits_scaling > 0)) r.fail("logits_scaling", j["logits_scaling"].dump(), "a positive number");
  }
  if (type == "smollm3") read_rope_layers(r, c);
  if (is_gemma(type)) read_gemma(r, file, type, c);
  else if (type == "mistral" || type == "phi3" || type == "mixtral")
    c.sliding_window = r.has("sliding_window") ? r.integer("sliding_window") : 0;
  else r.absent("sliding_window", "a sliding window is read for mistral, mixtral, phi3, gemma2 and gemma3_text only");
  if (type == "phi3") {
    c.fused_projections = true;
    c.rope_recompute_at_switch = c.rope_scaling.type == "longrope";
    c.residual_dropout = r.probability("resid_pdrop", 0);  // (embd_pdrop: transformers' Phi-3 never applies it)
  }
  if (r.has("layer_types") && !is_gemma(type))
    for (const auto& t : r.at("layer_types"))
      if (t != "full_attention" && !(type == "mistral" && t == "sliding_attention"))
        r.unsupported("layer_types", t.dump(), "every layer must use full attention");
  return c;
}

namespace {

std::shared_ptr<LanguageModel> build_llama(const json& j, const std::string& type) {
  const LlamaConfig c = read_llama_config(j, type);
  Generator init(0);
  return std::make_shared<Llama>(c, init);
}

// ---- Gemma 3's multimodal folders (gemma-3-4b and up): the text model
// alone, from text_config, its weights under language_model.; the vision
// tower and projector are left unread (Kiln takes text).

std::shared_ptr<LanguageModel> build_gemma3_text_of(const json& j) {
  ConfigReader r(j, "gemma3");
  if (!r.has("text_config") || !r.at("text_config").is_object())
    r.fail("text_config", r.has("text_config") ? r.at("text_config").dump().substr(0, 200) : "missing",
           "the text model's config (Gemma 3's multimodal folders hold one)");
  json text = r.at("text_config");
  if (text.contains("model_type") && text["model_type"] != "gemma3_text")
    r.unsupported("text_config.model_type", text["model_type"].dump(), "Kiln reads a gemma3_text model");
  if (!text.contains("tie_word_embeddings") && j.contains("tie_word_embeddings"))
    text["tie_word_embeddings"] = j["tie_word_embeddings"];
  return build_llama(text, "gemma3_text");
}

CheckpointName gemma3_multimodal_name(const std::string& p) { return {"language_model." + p}; }

bool gemma3_unread(const std::string& t) {
  return t.starts_with("vision_tower.") || t.starts_with("multi_modal_projector.") ||
         t.find("rotary_emb.") != std::string::npos;
}

// Mixtral's files (the hub's) keep the MLP as block_sparse_moe, each expert's
// gate, down and up projections as w1, w2 and w3; transformers 5 saves Kiln's
// names (its fused experts split at load: hf_model.cpp).
CheckpointName mixtral_name(const std::string& p) {
  static const std::pair<const char*, const char*> renames[] = {
      {".gate_proj.weight", ".w1.weight"}, {".down_proj.weight", ".w2.weight"}, {".up_proj.weight", ".w3.weight"}};
  const size_t mlp = p.find(".mlp.");
  if (mlp == std::string::npos) return {p};
  std::string name = p.substr(0, mlp) + ".block_sparse_moe." + p.substr(mlp + 5);
  if (name.find(".experts.") != std::string::npos)
    for (const auto& [from, to] : renames)
      if (name.ends_with(from)) name = name.substr(0, name.size() - std::strlen(from)) + to;
  return {name};
}

// lora_targets: peft's defaults (Phi-3 has none in peft, which then asks
// for target_modules; Kiln takes the fused attention projection).
CheckpointName same_name(const std::string& p) { return {p}; }

CausalLmFamily llama_family(const std::string& type, std::vector<std::string> lora_targets = {"q_proj", "v_proj"},
                            CheckpointName (*checkpoint_name)(const std::string&) = same_name) {
  return {type, [type](const json& j) { return build_llama(j, type); }, checkpoint_name,
          [](const std::string& t) { return t.find("rotary_emb.inv_freq") != std::string::npos; },
          std::move(lora_targets)};
}

// ---- GPT-2: Kiln's own GPT, whose parameter names are GPT-2's

std::shared_ptr<LanguageModel> build_gpt2(const json& j) {
  ConfigReader r(j, "gpt2");
  refuse_common(r);
  r.only("activation_function", {"gelu_new", "gelu_pytorch_tanh"});
  r.only("scale_attn_by_inverse_layer_idx", {false});
  r.only("add_cross_attention", {false});
  r.only("scale_attn_weights", {true});
  r.only("tie_word_embeddings", {true});
  GptConfig c;
  c.vocab_size = r.integer("vocab_size");
  c.block_size = r.integer("n_positions");
  c.n_layer = r.integer("n_layer");
  c.n_head = r.integer("n_head");
  c.n_embd = r.integer("n_embd");
  if (r.has("n_inner") && r.integer("n_inner") != 4 * c.n_embd)
    r.unsupported("n_inner", j["n_inner"].dump(), "Kiln's GPT MLP is 4 * n_embd wide");
  if (std::abs(r.number("layer_norm_epsilon", 1e-5) - 1e-5) > 1e-12)
    r.unsupported("layer_norm_epsilon", j["layer_norm_epsilon"].dump(), "1e-5 only");
  // Dropout acts in training only, where transformers' GPT-2 puts it.
  c.dropout = r.probability("resid_pdrop", 0.1);
  c.embedding_dropout = r.probability("embd_pdrop", 0.1);
  c.attention_dropout = r.probability("attn_pdrop", 0.1);
  Generator init(0);
  return std::make_shared<Gpt>(c, init, std::make_shared<Generator>(0));
}

// Kiln's Linear is [out, in]; GPT-2's Conv1D stores [in, out].
CheckpointName gpt2_name(const std::string& p) {
  for (const char* conv : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (p.size() > std::strlen(conv) && p.compare(p.size() - std::strlen(conv), std::string::npos, conv) == 0)
      return {p, true};
  return {p};
}

bool gpt2_buffer(const std::string& t) {
  return t.ends_with(".attn.bias") || t.ends_with(".attn.masked_bias") || t == "lm_head.weight";
}

const std::vector<CausalLmFamily>& families() {
  static const std::vector<CausalLmFamily> table = {
      llama_family("llama"),   llama_family("mistral"), llama_family("qwen2"),   llama_family("qwen3"),
      llama_family("olmo2"),   llama_family("granite"), llama_family("smollm3"), llama_family("phi3", {"qkv_proj"}),
      llama_family("gemma"),   llama_family("gemma2"),  llama_family("gemma3_text"),
      llama_family("mixtral", {"q_proj", "v_proj"}, mixtral_name), llama_family("qwen3_moe"), llama_family("olmoe"),
      {"gemma3", build_gemma3_text_of, gemma3_multimodal_name, gemma3_unread, {"q_proj", "v_proj"}},
      {"gpt2", build_gpt2, gpt2_name, gpt2_buffer, {"c_attn"}, /*lora_fan_in_fan_out=*/true},
  };
  return table;
}

// ---- BERT and DistilBERT sequence classifiers

std::vector<std::string> labels_of(const ConfigReader& r) {
  if (!r.has("id2label")) r.fail("id2label", "missing", "the classifier's labels, {\"0\": \"NEGATIVE\", ...}");
  const json& m = r.at("id2label");
  std::vector<std::string> labels(m.size());
  for (const auto& [id, label] : m.items()) {
    size_t i = 0;
    try {
      i = std::stoul(id);
    } catch (...) {
      r.fail("id2label", m.dump(), "ids 0..n-1 as keys");
    }
    if (i >= labels.size() || !label.is_string()) r.fail("id2label", m.dump(), "ids 0..n-1 mapped to label names");
    labels[i] = label.get<std::string>();
  }
  return labels;
}

// A classifier's config (with_labels), or an encoder's, which needs none.
BertConfig read_bert_config(const json& j, const std::string& flavor, bool with_labels) {
  ConfigReader r(j, flavor);
  refuse_common(r);
  if (with_labels) r.only("problem_type", {"single_label_classification"});
  BertConfig c;
  c.flavor = flavor;
  c.vocab_size = r.integer("vocab_size");
  c.max_positions = r.integer("max_position_embeddings");
  if (with_labels) c.labels = labels_of(r);
  c.pad_token_id = read_pad_token_id(r, c.vocab_size);
  if (flavor == "roberta") {
    if (!c.pad_token_id) r.fail("pad_token_id", "missing", "RoBERTa's padding id (its positions start after it)");
    c.position_offset = *c.pad_token_id + 1;
    if (c.position_offset >= c.max_positions)
      r.fail("max_position_embeddings", j["max_position_embeddings"].dump(), "more positions than pad_token_id + 1");
  }
  if (flavor == "bert" || flavor == "roberta") {
    r.only("hidden_act", {"gelu"});
    r.only("position_embedding_type", {"absolute"});
    c.hidden_size = r.integer("hidden_size");
    c.num_layers = r.integer("num_hidden_layers");
    c.num_heads = r.integer("num_attention_heads");
    c.intermediate_size = r.integer("intermediate_size");
    c.type_vocab_size = r.integer("type_vocab_size", 2);
    c.layer_norm_eps = r.number("layer_norm_eps", 1e-12);
    c.hidden_dropout = c.attention_output_dropout = r.probability("hidden_dropout_prob", 0.1);
    c.attention_dropout = r.probability("attention_probs_dropout_prob", 0.1);
    c.classifier_dropout = r.has("classifier_dropout") ? r.probability("classifier_dropout", 0) : c.hidden_dropout;
  } else {
    r.only("activation", {"gelu"});
    c.hidden_size = r.integer("dim");
    c.num_layers = r.integer("n_layers");
    c.num_heads = r.integer("n_heads");
    c.intermediate_size = r.integer("hidden_dim");
    c.type_vocab_size = 0;
    c.layer_norm_eps = 1e-12;  // fixed in transformers' DistilBERT
    c.hidden_dropout = r.probability("dropout", 0.1);  // none after the attention's projection
    c.attention_dropout = r.probability("attention_dropout", 0.1);
    c.classifier_dropout = r.probability("seq_classif_dropout", 0.2);
  }
  return c;
}

ClassifierFamily bert_family(const std::string& model_type, const std::string& flavor) {
  return {model_type,
          [flavor](const json& j) {
            Generator init(0);
            return std::make_shared<BertClassifier>(read_bert_config(j, flavor, true), init);
          },
          [flavor](const json& j) {
            Generator init(0);
            return std::make_shared<BertEncoder>(read_bert_config(j, flavor, false), init);
          },
          [](const std::string& t) {
            return t.ends_with("embeddings.position_ids") || t.ends_with("embeddings.token_type_ids");
          },
          flavor};
}

// ---- ModernBERT

// gelu (exact) or its tanh approximation, as transformers' ACT2FN names them.
bool reads_tanh_gelu(const ConfigReader& r, const std::string& key) {
  r.only(key, {"gelu", "gelu_pytorch_tanh", "gelu_new"});
  return r.text(key, "gelu") != "gelu";
}

// A RoPE of rope_parameters' layer type: the default kind, its base.
double modernbert_theta(const ConfigReader& r, const char* layer_type, const char* old_key, double fallback) {
  if (r.has("rope_parameters") && r.at("rope_parameters").is_object() && r.at("rope_parameters").contains(layer_type)) {
    ConfigReader p(r.at("rope_parameters")[layer_type], std::string("rope_parameters.") + layer_type);
    p.only("rope_type", {"default"});
    return p.number("rope_theta", fallback);
  }
  return r.number(old_key, fallback);
}

ModernBertConfig read_modernbert_config(const json& j, bool with_labels) {
  ConfigReader r(j, "modernbert");
  refuse_common(r);
  if (with_labels) r.only("problem_type", {"single_label_classification"});
  r.absent("rope_scaling", "ModernBERT's rotary positions are read unscaled");
  ModernBertConfig c;
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_layers = r.integer("num_hidden_layers");
  c.num_heads = r.integer("num_attention_heads");
  c.max_positions = r.integer("max_position_embeddings", 8192);
  c.norm_eps = r.number("norm_eps", 1e-5);
  c.norm_bias = r.flag("norm_bias", false);
  c.attention_bias = r.flag("attention_bias", false);
  c.mlp_bias = r.flag("mlp_bias", false);
  c.classifier_bias = r.flag("classifier_bias", false);
  c.tanh_gelu = reads_tanh_gelu(r, "hidden_activation");
  c.classifier_tanh_gelu = reads_tanh_gelu(r, "classifier_activation");
  r.only("classifier_pooling", {"cls", "mean"});
  c.mean_pooling = r.text("classifier_pooling", "cls") == "mean";
  c.window = r.integer("local_attention", 128) / 2;
  c.global_theta = modernbert_theta(r, "full_attention", "global_rope_theta", 160000);
  c.local_theta = modernbert_theta(r, "sliding_attention", "local_rope_theta", 10000);
  const int64_t every = r.integer("global_attn_every_n_layers", 3);
  c.sliding_layers = read_sliding_layers(r, c.num_layers, [every](int64_t i) { return i % every != 0; });
  c.pad_token_id = read_pad_token_id(r, c.vocab_size);
  c.embedding_dropout = r.probability("embedding_dropout", 0);
  c.attention_dropout = r.probability("attention_dropout", 0);
  c.mlp_dropout = r.probability("mlp_dropout", 0);
  c.classifier_dropout = r.probability("classifier_dropout", 0);
  if (with_labels) c.labels = labels_of(r);
  return c;
}

ClassifierFamily modernbert_family() {
  return {"modernbert",
          [](const json& j) {
            Generator init(0);
            return std::make_shared<ModernBertClassifier>(read_modernbert_config(j, true), init);
          },
          [](const json& j) {
            Generator init(0);
            return std::make_shared<ModernBertEncoder>(read_modernbert_config(j, false), init);
          },
          [](const std::string&) { return false; }, "model"};
}

// ---- NomicBERT: the hub checkpoint's config (its modeling code's GPT-2 names: n_embd, ...) or transformers'
// NomicBertConfig (hidden_size, ...), which keeps the checkpoint's weight names.

NomicBertConfig read_nomic_bert_config(const json& j) {
  ConfigReader r(j, "nomic_bert");
  refuse_common(r);
  r.only("activation_function", {"swiglu"});
  r.only("hidden_act", {"silu"});
  r.only("causal", {false});
  r.only("prenorm", {false});
  r.only("rotary_emb_fraction", {1.0, 1});
  r.only("rotary_emb_interleaved", {false});
  r.only("use_rms_norm", {false});
  r.only("parallel_block", {false});
  r.absent("rotary_emb_scale_base", "xPos scaling of the rotary positions");
  r.absent("rotary_scaling_factor", "dynamic NTK scaling past the trained positions");
  r.only("moe_every_n_layers", {0});  // nomic-embed-text-v2-moe's experts
  // The hub's key where it has one, else transformers'.
  auto integer = [&](const char* hub, const char* transformers) {
    return r.has(hub) ? r.integer(hub) : r.integer(transformers);
  };
  NomicBertConfig c;
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = integer("n_embd", "hidden_size");
  c.num_layers = integer("n_layer", "num_hidden_layers");
  c.num_heads = integer("n_head", "num_attention_heads");
  c.intermediate_size = integer("n_inner", "intermediate_size");
  r.only("head_dim", {c.hidden_size / c.num_heads});
  // Trained for max_trained_positions (2048 in v1 and v1.5, whose n_positions says 8192), as llama.cpp reads it.
  c.max_positions = r.has("n_positions") ? std::min(r.integer("n_positions"), r.integer("max_trained_positions", 2048))
                                         : r.integer("max_position_embeddings", 2048);
  c.type_vocab_size = r.has("type_vocab_size") && r.at("type_vocab_size") == 0 ? 0 : r.integer("type_vocab_size", 2);
  c.layer_norm_eps = r.number("layer_norm_epsilon", r.number("layer_norm_eps", 1e-12));
  if (r.has("rope_parameters")) {
    ConfigReader p(r.at("rope_parameters"), "rope_parameters");
    p.only("rope_type", {"default"});
    c.rope_theta = p.number("rope_theta", 1000);
  } else {
    c.rope_theta = r.number("rotary_emb_base", 1000);  // transformers' default_theta
  }
  // transformers' NomicBertModel has no biases; the hub's config says.
  c.qkv_bias = r.flag("qkv_proj_bias", false);
  c.fc1_bias = r.flag("mlp_fc1_bias", false);
  c.fc2_bias = r.flag("mlp_fc2_bias", false);
  c.pad_token_id = read_pad_token_id(r, c.vocab_size);
  return c;
}

ClassifierFamily nomic_bert_family() {
  return {"nomic_bert",
          [](const json&) -> std::shared_ptr<SequenceClassifier> {
            KILN_FAIL("nomic_bert is read as an embedding model (kiln embed, /v1/embeddings), not a classifier");
          },
          [](const json& j) {
            Generator init(0);
            return std::make_shared<NomicBertEncoder>(read_nomic_bert_config(j), init);
          },
          [](const std::string&) { return false; }, ""};
}

const std::vector<ClassifierFamily>& classifier_families() {
  static const std::vector<ClassifierFamily> table = {bert_family("bert", "bert"),
                                                      bert_family("distilbert", "distilbert"),
                                                      bert_family("roberta", "roberta"),
                                                      bert_family("xlm-roberta", "roberta"),
                                                      modernbert_family(),
                                                      nomic_bert_family()};
  return table;
}

}  // namespace

namespace {

template <typename Family>
const Family* find_in(const std::vector<Family>& table, const std::string& model_type) {
  for (const auto& f : table)
    if (f.model_type == model_type) return &f;
  return nullptr;
}

template <typename Family>
std::string names_of(const std::vector<Family>& table) {
  std::string out;
  for (const auto& f : table) out += (out.empty() ? "" : ", ") + f.model_type;
  return out;
}

}  // namespace

const ClassifierFamily* find_classifier_family(const std::string& t) { return find_in(classifier_families(), t); }

std::vector<std::string> classifier_labels(const json& config, const std::string& model_type) {
  return labels_of(ConfigReader(config, model_type));
}
std::string supported_classifier_types() { return names_of(classifier_families()); }
const CausalLmFamily* find_causal_lm_family(const std::string& t) { return find_in(families(), t); }
std::string supported_causal_lm_types() { return names_of(families()); }

}  // namespace kiln::models
