#include "models/hf/gguf_architectures.h"

#include <cmath>
#include <regex>
#include <vector>

#include "kiln/core/error.h"
#include "models/hf/gguf_encoder.h"

namespace kiln::models {

using nlohmann::json;

namespace {
using Meta = GgufMeta;

// A small F32 tensor's values (RoPE factors).
std::vector<double> values_of(const GgufContents& file, const std::string& name) {
  const GgufTensorInfo* t = file.find(name);
  KILN_CHECK(t && t->dims.size() == 1 && t->type == GgufType::F32, "GGUF: '", name, "' is not an F32 vector");
  const std::vector<float> v = file.f32_values(*t);
  return {v.begin(), v.end()};
}

}  // namespace

std::vector<double> llama3_rope_divisors(double theta, int64_t dim, double factor, double low, double high, double orig) {
  std::vector<double> out;
  for (int64_t i = 0; i < dim; i += 2) {
    const float wavelength = float(2 * M_PI) / (1.0f / std::pow(float(theta), float(i) / float(dim)));
    if (wavelength < float(orig / high)) out.push_back(1);
    else if (wavelength > float(orig / low)) out.push_back(factor);
    else {
      const float smooth = (float(orig) / wavelength - float(low)) / float(high - low);
      out.push_back(1.0f / ((1 - smooth) / float(factor) + smooth));
    }
  }
  return out;
}

namespace {

// rope_freqs.weight (Llama 3.1+): each frequency's divisor. transformers'
// config names the ramp that made them (factor, low_freq_factor,
// high_freq_factor, original_max_position_embeddings); it is recovered
// here (the same divisors follow from the three ratios, so low is taken as 1)
// and checked against every divisor of the file.
json llama3_rope(const std::vector<double>& divisors, double theta, int64_t head_dim) {
  double factor = 1;
  for (double d : divisors) factor = std::max(factor, d);
  if (factor <= 1 + 1e-6) return json();
  KILN_CHECK(int64_t(divisors.size()) * 2 == head_dim, "GGUF: rope_freqs.weight holds ", divisors.size(),
             " factors for heads of ", head_dim);
  // Between the ends: 1 / d = (1 - s) / factor + s, s = (original / wavelength - low) / (high - low).
  std::vector<std::pair<double, double>> ramp;  // (1 / wavelength, s)
  double longest_unscaled = 0, shortest_scaled = 1e300;
  for (size_t i = 0; i < divisors.size(); ++i) {
    const double inverse_wavelength = 1 / (2 * M_PI * std::pow(theta, double(2 * i) / double(head_dim)));
    const double d = divisors[i];
    if (d <= 1 + 1e-6) longest_unscaled = std::max(longest_unscaled, 1 / inverse_wavelength);
    else if (d >= factor * (1 - 1e-6)) shortest_scaled = std::min(shortest_scaled, 1 / inverse_wavelength);
    else ramp.emplace_back(inverse_wavelength, (1 / d - 1 / factor) / (1 - 1 / factor));
  }
  std::vector<std::pair<double, double>> candidates;  // (high, original)
  if (ramp.empty()) {
    candidates = {{4, 8192}, {4, std::round(std::sqrt(4 * longest_unscaled * shortest_scaled))}};
  } else {
    double original = 0;  // with high = 4 (Meta's): original = (1 + 3 s) * wavelength
    for (auto [inverse, s] : ramp) original += (1 + 3 * s) / inverse / double(ramp.size());
    candidates.push_back({4, std::round(original)});
    if (ramp.size() >= 2) {  // both free: original * inverse - s * high = 1 - s, by least squares
      double aa = 0, ab = 0, bb = 0, ay = 0, by = 0;
      for (auto [a, s] : ramp) aa += a * a, ab -= a * s, bb += s * s, ay += a * (1 - s), by -= s * (1 - s);
      const double det = aa * bb - ab * ab;
      if (std::abs(det) > 0) candidates.push_back({(aa * by - ab * ay) / det, std::round((bb * ay - ab * by) / det)});
    }
  }
  for (auto [high, original] : candidates) {
    if (!(high > 1 && original > 0)) continue;
    const std::vector<double> again = llama3_rope_divisors(theta, head_dim, factor, 1, high, original);
    bool same = true;
    for (size_t i = 0; i < divisors.size(); ++i) same = same && std::abs(again[i] - divisors[i]) <= 1e-5 * divisors[i];
    if (same)
      return {{"rope_type", "llama3"}, {"factor", factor}, {"low_freq_factor", 1.0}, {"high_freq_factor", high},
              {"original_max_position_embeddings", int64_t(original)}, {"rope_theta", theta}};
  }
  KILN_FAIL("GGUF: rope_freqs.weight holds RoPE factors that are not Llama 3's scaling (a factor of ", factor,
            " ramped over a range of wavelengths); Kiln cannot express them");
}

// The RoPE scaling a file states (rope.scaling.*, rope_freqs.weight), as transformers' rope_parameters.
json rope_parameters(const GgufContents& file, const Meta& meta, double theta, int64_t head_dim) {
  const std::string type = meta.text("rope.scaling.type", "none");
  const double factor = meta.number("rope.scaling.factor", meta.number("rope.scale_linear", 0));
  if (type == "linear" && factor > 0 && factor != 1)
    return {{"rope_type", "linear"}, {"factor", factor}, {"rope_theta", theta}};
  if (type == "yarn") {
    KILN_CHECK(!meta.has("rope.scaling.yarn_log_multiplier"), "GGUF: YaRN with a log multiplier (DeepSeek's) is not "
               "read from GGUF yet");
    json r = {{"rope_type", "yarn"}, {"factor", factor}, {"rope_theta", theta},
              {"original_max_position_embeddings", meta.positive("rope.scaling.original_context_length")}};
    if (meta.has("rope.scaling.yarn_beta_fast")) r["beta_fast"] = meta.number("rope.scaling.yarn_beta_fast", 32);
    if (meta.has("rope.scaling.yarn_beta_slow")) r["beta_slow"] = meta.number("rope.scaling.yarn_beta_slow", 1);
    // llama.cpp scales cos and sin by the default's 0.1 ln(factor) + 1 times
    // rope.scaling.attn_factor (it overrides rope.scaling.yarn_attn_factor
    // with its own value, so that key changes nothing and is not read).
    if (meta.has("rope.scaling.attn_factor"))
      r["attention_factor"] = meta.number("rope.scaling.attn_factor", 1) * yarn_mscale(factor, 1);
    return r;
  }
  KILN_CHECK(type == "none" || type == "linear", "GGUF: rope scaling '", type, "' is not read from GGUF yet");
  if (file.find("rope_freqs.weight")) return llama3_rope(values_of(file, "rope_freqs.weight"), theta, head_dim);
  return json();
}

void read_experts(const Meta& meta, json& c) {
  c["num_local_experts"] = c["num_experts"] = meta.positive("expert_count");
  c["num_experts_per_tok"] = meta.positive("expert_used_count");
}

void read_qwen3_moe(const GgufContents&, const Meta& meta, json& c) {
  read_experts(meta, c);
  c["moe_intermediate_size"] = meta.positive("expert_feed_forward_length");
  c["norm_topk_prob"] = true;  // llama.cpp's qwen3moe always renormalises the chosen experts
}

void read_olmoe(const GgufContents&, const Meta& meta, json& c) {
  read_experts(meta, c);
  c["norm_topk_prob"] = false;
}

void read_mixtral(const GgufContents&, const Meta& meta, json& c) { read_experts(meta, c); }

void read_granite(const GgufContents&, const Meta& meta, json& c) {
  c["embedding_multiplier"] = meta.number("embedding_scale", 1);
  c["attention_multiplier"] = meta.number("attention.scale", 1);
  c["residual_multiplier"] = meta.number("residual_scale", 1);
  c["logits_scaling"] = meta.number("logit_scale", 1);
}

// Phi-3: the rotated share of each head (rope.dimension_count), LongRoPE's two
// factor sets (rope_factors_short/long.weight) and the sliding window
// (which llama.cpp leaves off for Phi-3; transformers, and Kiln, apply it).
void read_phi3(const GgufContents& file, const Meta& meta, json& c) {
  const int64_t head_dim = c["hidden_size"].get<int64_t>() / c["num_attention_heads"].get<int64_t>();
  if (meta.has("rope.dimension_count") && meta.positive("rope.dimension_count") != head_dim)
    c["partial_rotary_factor"] = double(meta.positive("rope.dimension_count")) / double(head_dim);
  if (file.find("rope_factors_long.weight")) {
    // The original context at the top level too, where transformers' Phi-3 reads it (its default is 4096).
    c["original_max_position_embeddings"] = meta.positive("rope.scaling.original_context_length");
    c["rope_parameters"] = {{"rope_type", "longrope"},
                            {"rope_theta", c["rope_theta"]},
                            {"short_factor", values_of(file, "rope_factors_short.weight")},
                            {"long_factor", values_of(file, "rope_factors_long.weight")},
                            {"original_max_position_embeddings", c["original_max_position_embeddings"]}};
    if (c.contains("partial_rotary_factor")) c["rope_parameters"]["partial_rotary_factor"] = c["partial_rotary_factor"];
  }
  if (meta.number("attention.sliding_window", 0) > 0) c["sliding_window"] = meta.positive("attention.sliding_window");
}

// llama.cpp knows Gemma 2's and Gemma 3's 27B models by their layer counts.
constexpr int64_t kGemma2LayersOf27B = 46, kGemma3LayersOf27B = 62;

// Gemma 2 and 3: transformers' query_pre_attn_scalar as llama.cpp chooses it
// (the file does not say): hidden / heads for the 27B models (known by their
// layer count), head_dim otherwise.
void read_attention_scalar(json& c, int64_t layers_of_27b) {
  const int64_t heads = c["num_attention_heads"].get<int64_t>(), hidden = c["hidden_size"].get<int64_t>();
  c["query_pre_attn_scalar"] = c["num_hidden_layers"] == layers_of_27b ? hidden / heads
                                                                        : c.value("head_dim", hidden / heads);
}

void read_gemma(const GgufContents&, const Meta&, json& c) { c["hidden_act"] = "gelu_pytorch_tanh"; }

void read_gemma2(const GgufContents&, const Meta& meta, json& c) {
  c["hidden_activation"] = "gelu_pytorch_tanh";
  read_attention_scalar(c, kGemma2LayersOf27B);
  for (const char* cap : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (meta.has(cap)) c[cap] = meta.number(cap, 0);
  if (meta.has("attention.sliding_window")) c["sliding_window"] = meta.positive("attention.sliding_window");
}

// Gemma 3: sliding layers by attention.sliding_window_pattern (a period, or a
// flag per layer; llama.cpp's default period is 6: five sliding, one global),
// the sliding layers' own RoPE base, and RoPE scaling on the global ones only.
void read_gemma3(const GgufContents&, const Meta& meta, json& c) {
  c["hidden_activation"] = "gelu_pytorch_tanh";
  read_attention_scalar(c, kGemma3LayersOf27B);
  if (meta.has("final_logit_softcapping")) c["final_logit_softcapping"] = meta.number("final_logit_softcapping", 0);
  const int64_t layers = c["num_hidden_layers"].get<int64_t>();
  const int64_t window = int64_t(meta.number("attention.sliding_window", 0));
  json types = json::array();
  const json pattern = meta.has("attention.sliding_window_pattern") ? meta.at("attention.sliding_window_pattern") : json(6);
  KILN_CHECK((pattern.is_number_integer() && pattern.get<int64_t>() >= 0) || (pattern.is_array() && int64_t(pattern.size()) == layers),
             "GGUF: attention.sliding_window_pattern is ", pattern.dump().substr(0, 100),
             "; expected a period or one flag per layer");
  for (int64_t i = 0; i < layers; ++i) {
    const bool slides = window > 0 && (pattern.is_array() ? pattern[size_t(i)] == true
                                                          : pattern == 0 || i % pattern.get<int64_t>() < pattern.get<int64_t>() - 1);
    types.push_back(slides ? "sliding_attention" : "full_attention");
  }
  c["layer_types"] = types;
  if (window > 0) c["sliding_window"] = window;
  json global = c.contains("rope_parameters") ? c["rope_parameters"] : json{{"rope_type", "default"}};
  global["rope_theta"] = c["rope_theta"];
  c["rope_parameters"] = {{"full_attention", global},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", meta.number("rope.freq_base_swa", 10000)}}}};
}

// EmbeddingGemma (llama.cpp's gemma-embedding): Gemma 3's body attending both ways, its sliding layers over a
// symmetric window, its attention scaled by 1/sqrt(head_dim) (llama.cpp's, whatever query_pre_attn_scalar was).
void read_gemma_embedding(const GgufContents& file, const Meta& meta, json& c) {
  read_gemma3(file, meta, c);
  c["query_pre_attn_scalar"] =
      c.value("head_dim", c["hidden_size"].get<int64_t>() / c["num_attention_heads"].get<int64_t>());
  c["use_bidirectional_attention"] = true;
  c["architectures"] = {"Gemma3TextModel"};
}

// ---- The writers (kiln export --format gguf), each the inverse of its reader above.

void write_experts(const LlamaConfig& L, const std::string& p, json& m, const std::string& arch, bool renormalises) {
  for (int64_t i = 0; i < L.num_layers; ++i)
    KILN_CHECK(L.is_moe(i), "GGUF export: llama.cpp's ", arch, " has experts in every layer; this model's layer ", i,
               " is dense");
  KILN_CHECK(L.normalize_top_k == renormalises, "GGUF export: llama.cpp's ", arch, renormalises ? "" : " does not",
             " renormalise the chosen experts' weights; this model's norm_topk_prob differs");
  m[p + "expert_count"] = L.num_experts;
  m[p + "expert_used_count"] = L.experts_per_token;
}

void write_mixtral(const LlamaConfig& L, const std::string& p, json& m) { write_experts(L, p, m, "llama", true); }
void write_olmoe(const LlamaConfig& L, const std::string& p, json& m) { write_experts(L, p, m, "olmoe", false); }
void write_qwen3_moe(const LlamaConfig& L, const std::string& p, json& m) {
  write_experts(L, p, m, "qwen3moe", true);
  m[p + "expert_feed_forward_length"] = L.expert_intermediate_size;
}

void write_granite(const LlamaConfig& L, const std::string& p, json& m) {
  m[p + "embedding_scale"] = L.embedding_multiplier;
  m[p + "attention.scale"] = L.attention_multiplier;
  m[p + "residual_scale"] = L.residual_multiplier;
  m[p + "logit_scale"] = L.logits_scaling;
}

void write_phi3(const LlamaConfig& L, const std::string& p, json& m) {
  if (L.sliding_window > 0) m[p + "attention.sliding_window"] = L.sliding_window;
}

void write_smollm3(const LlamaConfig& L, const std::string&, json&) {
  for (int64_t i = 0; i < L.num_layers; ++i)
    KILN_CHECK(L.rope_layers.empty() || L.rope_layers[size_t(i)] == ((i + 1) % 4 != 0), "GGUF export: llama.cpp's "
               "SmolLM3 leaves every fourth layer unrotated; this model's no_rope_layers differ");
}

// llama.cpp's Gemma 2/3 attention scale (read_attention_scalar), which the model's must be.
void check_attention_scale(const LlamaConfig& L, int64_t layers_of_27b) {
  const double scalar = L.num_layers == layers_of_27b ? double(L.hidden_size / L.num_heads) : double(L.head_dim);
  KILN_CHECK(std::abs(L.attention_multiplier * std::sqrt(scalar) - 1) < 1e-6, "GGUF export: llama.cpp scales "
             "Gemma's attention by 1/sqrt(", scalar, "); this model's query_pre_attn_scalar differs");
}

void write_gemma2(const LlamaConfig& L, const std::string& p, json& m) {
  check_attention_scale(L, kGemma2LayersOf27B);
  for (int64_t i = 0; i < L.num_layers; ++i)
    KILN_CHECK(L.slides(i) == (i % 2 == 0), "GGUF export: llama.cpp's Gemma 2 slides every other layer; this "
               "model's layer_types differ");
  m[p + "attn_logit_softcapping"] = L.attention_softcap;
  m[p + "final_logit_softcapping"] = L.final_softcap;
  m[p + "attention.sliding_window"] = L.sliding_window;
}

void write_gemma3(const LlamaConfig& L, const std::string& p, json& m) {
  KILN_CHECK(!L.bidirectional, "GGUF export: an embedding model attending both ways (EmbeddingGemma) is written by "
             "llama.cpp's converter as gemma-embedding, with its Dense modules; Kiln exports language models");
  check_attention_scale(L, kGemma3LayersOf27B);
  if (L.final_softcap > 0) m[p + "final_logit_softcapping"] = L.final_softcap;
  if (L.sliding_window > 0) {
    m[p + "attention.sliding_window"] = L.sliding_window;
    json pattern = json::array();
    for (int64_t i = 0; i < L.num_layers; ++i) pattern.push_back(L.slides(i));
    m[p + "attention.sliding_window_pattern"] = pattern;
  }
  if (L.local_rope_theta > 0) m[p + "rope.freq_base_swa"] = L.local_rope_theta;
}

// GPT-2: its own config keys (n_embd, ...), LayerNorms with biases, learned positions, a 4x GELU MLP.
void read_gpt2(const GgufContents&, const Meta& meta, json& c) {
  const json gpt2 = {{"model_type", "gpt2"},
                     {"n_embd", c["hidden_size"]},
                     {"n_layer", c["num_hidden_layers"]},
                     {"n_head", c["num_attention_heads"]},
                     {"n_positions", c["max_position_embeddings"]},
                     {"n_inner", c["intermediate_size"]},
                     {"vocab_size", c["vocab_size"]},
                     {"layer_norm_epsilon", meta.number("attention.layer_norm_epsilon", 1e-5)},
                     {"activation_function", "gelu_new"},
                     {"tie_word_embeddings", c["tie_word_embeddings"]}};
  c = gpt2;
}

const std::map<std::string, std::string> kGemmaNorms = {
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}};

// Rows are tried in order: a routed row only takes files with experts.
const std::vector<GgufArchitecture>& architectures() {
  static const std::vector<GgufArchitecture> rows = {
      {.arch = "llama", .model_type = "mixtral", .hf_architecture = "MixtralForCausalLM", .permuted_qk = true,
       .routed = true, .read_config = read_mixtral, .write_config = write_mixtral},
      {.arch = "llama", .model_type = "llama", .hf_architecture = "LlamaForCausalLM", .permuted_qk = true},
      {.arch = "qwen2", .model_type = "qwen2", .hf_architecture = "Qwen2ForCausalLM"},
      {.arch = "qwen3", .model_type = "qwen3", .hf_architecture = "Qwen3ForCausalLM"},
      {.arch = "qwen3moe", .model_type = "qwen3_moe", .hf_architecture = "Qwen3MoeForCausalLM", .routed = true,
       .read_config = read_qwen3_moe, .write_config = write_qwen3_moe},
      {.arch = "gemma", .model_type = "gemma", .hf_architecture = "GemmaForCausalLM", .norm_offset = 1,
       .read_config = read_gemma},
      {.arch = "gemma2", .model_type = "gemma2", .hf_architecture = "Gemma2ForCausalLM", .norm_offset = 1,
       .names = kGemmaNorms, .read_config = read_gemma2, .write_config = write_gemma2},
      {.arch = "gemma3", .model_type = "gemma3_text", .hf_architecture = "Gemma3ForCausalLM", .norm_offset = 1,
       .names = kGemmaNorms, .read_config = read_gemma3, .write_config = write_gemma3},
      {.arch = "gemma-embedding", .model_type = "gemma3_text", .hf_architecture = "Gemma3TextModel",
       .norm_offset = 1, .names = kGemmaNorms, .read_config = read_gemma_embedding},
      {.arch = "phi3", .model_type = "phi3", .hf_architecture = "Phi3ForCausalLM",
       .names = {{"attn_qkv.weight", "self_attn.qkv_proj.weight"}, {"ffn_up.weight", "mlp.gate_up_proj.weight"}},
       .read_config = read_phi3, .write_config = write_phi3},
      {.arch = "olmo2", .model_type = "olmo2", .hf_architecture = "Olmo2ForCausalLM",
       .names = {{"post_attention_norm.weight", "post_attention_layernorm.weight"},
                 {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}}},
      {.arch = "olmoe", .model_type = "olmoe", .hf_architecture = "OlmoeForCausalLM", .routed = true,
       .read_config = read_olmoe, .write_config = write_olmoe},
      {.arch = "granite", .model_type = "granite", .hf_architecture = "GraniteForCausalLM", .permuted_qk = true,
       .read_config = read_granite, .write_config = write_granite},
      // llama.cpp leaves every fourth layer unrotated, as transformers' (and Kiln's) default no_rope_layer_interval
      {.arch = "smollm3", .model_type = "smollm3", .hf_architecture = "SmolLM3ForCausalLM", .permuted_qk = true,
       .write_config = write_smollm3},
      {.arch = "gpt2", .model_type = "gpt2", .hf_architecture = "GPT2LMHeadModel",
       .names = {{"token_embd.weight", "transformer.wte.weight"}, {"position_embd.weight", "transformer.wpe.weight"},
                 {"output_norm.weight", "transformer.ln_f.weight"}, {"output_norm.bias", "transformer.ln_f.bias"},
                 {"attn_norm.weight", "ln_1.weight"}, {"attn_norm.bias", "ln_1.bias"},
                 {"attn_qkv.weight", "attn.c_attn.weight"}, {"attn_qkv.bias", "attn.c_attn.bias"},
                 {"attn_output.weight", "attn.c_proj.weight"}, {"attn_output.bias", "attn.c_proj.bias"},
                 {"ffn_norm.weight", "ln_2.weight"}, {"ffn_norm.bias", "ln_2.bias"},
                 {"ffn_up.weight", "mlp.c_fc.weight"}, {"ffn_up.bias", "mlp.c_fc.bias"},
                 {"ffn_down.weight", "mlp.c_proj.weight"}, {"ffn_down.bias", "mlp.c_proj.bias"}},
       .layer_prefix = "transformer.h.",
       .read_config = read_gpt2},
  };
  return rows;
}

// GGUF's names -> transformers' (blk.N.* per layer), shared by the architectures; a name an architecture
// lacks is never looked up. Expert tensors hold every expert ([experts, rows, cols]).
const std::map<std::string, std::string>& common_names() {
  static const std::map<std::string, std::string> names = {
      {"token_embd.weight", "model.embed_tokens.weight"},   {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},                  {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},         {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},         {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},             {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},             {"attn_output.bias", "self_attn.o_proj.bias"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},          {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},          {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},    {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"ffn_gate_exps.weight", "mlp.experts.gate_proj.weight"}, {"ffn_up_exps.weight", "mlp.experts.up_proj.weight"},
      {"ffn_down_exps.weight", "mlp.experts.down_proj.weight"}};
  return names;
}

}  // namespace

const GgufArchitecture& gguf_architecture(const json& m) {
  const json* a = m.contains("general.architecture") ? &m["general.architecture"] : nullptr;
  const std::string arch = a && a->is_string() ? a->get<std::string>() : "";
  const bool has_experts = m.contains(arch + ".expert_count") && m[arch + ".expert_count"] != 0;
  for (const auto& row : architectures())
    if (arch == row.arch && (!row.routed || has_experts)) return row;
  std::string known;
  for (const auto& row : architectures())
    if (known.find(row.arch) == std::string::npos) known += (known.empty() ? "" : ", ") + row.arch;
  KILN_FAIL("GGUF: architecture '", arch, "' is not one Kiln loads from GGUF yet (it loads ", known, ")");
}

std::string gguf_hf_name(const GgufArchitecture& arch, const std::string& gguf_name) {
  static const std::regex layer(R"(blk\.(\d+)\.(.+))");
  std::smatch m;
  const bool in_layer = std::regex_match(gguf_name, m, layer);
  const std::string key = in_layer ? m[2].str() : gguf_name;
  const auto own = arch.names.find(key);
  std::string name = own != arch.names.end() ? own->second : "";
  if (name.empty()) {
    const auto it = common_names().find(key);
    if (it == common_names().end()) return "";
    name = it->second;
  }
  return in_layer ? arch.layer_prefix + m[1].str() + "." + name : name;
}

std::vector<int64_t> gguf_qk_file_rows(int64_t rows, int64_t heads) {
  const int64_t D = rows / heads;
  KILN_CHECK(rows % heads == 0 && D % 2 == 0, "GGUF: a projection of ", rows, " rows does not split into ", heads,
             " heads of even width");
  std::vector<int64_t> source(static_cast<size_t>(rows));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < D / 2; ++i)
      for (int64_t j = 0; j < 2; ++j) source[size_t(h * D + j * D / 2 + i)] = h * D + 2 * i + j;
  return source;
}

std::string gguf_exportable_types() {
  std::string out = "mistral";
  for (const auto& row : architectures())
    if (&row == gguf_architecture_of_type(row.model_type)) out += ", " + row.model_type;  // the first row of a type
  return out;
}

const GgufArchitecture* gguf_architecture_of_type(const std::string& model_type) {
  for (const auto& row : architectures())
    if (row.model_type == model_type) return &row;
  return nullptr;
}

std::string gguf_name_of(const GgufArchitecture& arch, const std::string& hf_name) {
  // A layer's name: layer_prefix, its number, a dot, then the key the tables name.
  std::string layer, key = hf_name;
  if (hf_name.starts_with(arch.layer_prefix)) {
    const size_t dot = hf_name.find('.', arch.layer_prefix.size());
    layer = hf_name.substr(arch.layer_prefix.size(), dot == std::string::npos ? 0 : dot - arch.layer_prefix.size());
    if (!layer.empty() && layer.find_first_not_of("0123456789") == std::string::npos) key = hf_name.substr(dot + 1);
    else layer.clear();
  }
  std::string name;
  for (const auto& [gguf, hf] : arch.names)
    if (hf == key) name = gguf;
  for (const auto& [gguf, hf] : common_names())
    if (name.empty() && hf == key && !arch.names.contains(gguf)) name = gguf;
  if (name.empty()) return "";
  return layer.empty() ? name : "blk." + layer + "." + name;
}

json hf_config_from_gguf(const GgufContents& file) {
  const json& m = file.header.metadata;
  if (is_gguf_encoder(m)) return gguf_encoder_config(file);
  const GgufArchitecture& row = gguf_architecture(m);
  const Meta meta{m, row.arch + "."};
  json c = {{"model_type", row.model_type},
            {"hidden_size", meta.positive("embedding_length")},
            {"num_hidden_layers", meta.positive("block_count")},
            {"intermediate_size", meta.positive("feed_forward_length")},
            {"num_attention_heads", meta.positive("attention.head_count")},
            {"max_position_embeddings", meta.positive("context_length")},
            {"tie_word_embeddings", file.find("output.weight") == nullptr}};
  KILN_CHECK(c["num_hidden_layers"].get<int64_t>() <= kGgufMaxLayers, "GGUF: '", row.arch, ".block_count' is ",
             c["num_hidden_layers"].get<int64_t>(), "; Kiln reads models of at most ", kGgufMaxLayers,
             " layers (the largest published have about 130), so the file is likely damaged");
  c["num_key_value_heads"] = meta.has("attention.head_count_kv") ? meta.positive("attention.head_count_kv")
                                                                 : c["num_attention_heads"].get<int64_t>();
  if (meta.has("attention.key_length")) c["head_dim"] = meta.positive("attention.key_length");
  if (file.find("blk.0.attn_output.bias")) c["attention_bias"] = true;  // (Qwen2's q, k and v biases are its family's)
  c["rope_theta"] = meta.number("rope.freq_base", 10000);  // llama.cpp's default
  if (meta.has("attention.layer_norm_rms_epsilon")) c["rms_norm_eps"] = meta.number("attention.layer_norm_rms_epsilon", 0);
  const GgufTensorInfo* embedding = file.find("token_embd.weight");
  KILN_CHECK(embedding && embedding->dims.size() == 2, "GGUF: the file lacks a 2-D token_embd.weight");
  c["vocab_size"] = embedding->dims[1];
  const int64_t head_dim = c.value("head_dim", c["hidden_size"].get<int64_t>() / c["num_attention_heads"].get<int64_t>());
  const int64_t rotated = meta.has("rope.dimension_count") ? meta.positive("rope.dimension_count") : head_dim;
  if (json rope = rope_parameters(file, meta, c["rope_theta"].get<double>(), rotated); !rope.is_null())
    c["rope_parameters"] = rope;
  if (row.read_config) row.read_config(file, meta, c);
  // A file that names its pooling holds an embedder's body (llama.cpp's converter writes it for a
  // sentence-transformers folder: Qwen3-Embedding's last token): <Arch>Model, as transformers saves the body. Rank
  // pooling with a classifier (cls.output: Qwen3-Reranker's "yes" and "no" rows of its output) is a reranker:
  // <Arch>ForSequenceClassification, its last token scored.
  const std::string family = row.hf_architecture.substr(0, row.hf_architecture.find("For"));
  if (meta.has("pooling_type") && meta.at("pooling_type") == kGgufRankPooling && file.find("cls.output.weight")) {
    c["architectures"] = {family + "ForSequenceClassification"};
    c["id2label"] = gguf_classifier_id2label(file, meta);
  } else if (meta.has("pooling_type") && !c.contains("architectures")) {  // (an embedder's row may name its body)
    c["architectures"] = {family + "Model"};
  }
  if (meta.has("pooling_type")) {  // what pads a batch of rows (none: the eos, as transformers' pooled heads take it)
    const json pad = m.value("tokenizer.ggml.padding_token_id", m.value("tokenizer.ggml.eos_token_id", json()));
    if (pad.is_number_integer() && pad.get<int64_t>() >= 0) c["pad_token_id"] = pad;
  }
  return c;
}

}  // namespace kiln::models
