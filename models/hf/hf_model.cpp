#include "models/hf/hf_model.h"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "kiln/core/error.h"
#include "kiln/io/gguf.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/text_file.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers.h"
#include "kiln/text/gguf_vocab.h"
#include "models/common/language_model_encoder.h"
#include "models/hf/families.h"
#include "models/hf/gguf_encoder.h"
#include "models/hf/gguf_model.h"
#include "models/hf/ollama_store.h"
#include "models/hf/prompt_reranker.h"
#include "models/hf/sampling_defaults.h"

namespace kiln::models {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path& path, const std::string& what) {
  if (!fs::is_regular_file(path)) KILN_FAIL("cannot read ", path.string(), " (", what, ")");
  return read_json_file(path.string());
}

// Points `param` at `value`'s memory (no copy), or at a converted copy when
// `dtype` asks for another. The shape must match.
void adopt(Tensor& param, const Tensor& value, const std::string& name, std::optional<DType> dtype) {
  KILN_CHECK(param.shape() == value.shape(), "checkpoint tensor '", name, "' has shape ", shape_str(value.shape()),
             "; the model built from config.json needs ", shape_str(param.shape()));
  KILN_CHECK(dtype_is_floating(value.dtype()), "checkpoint tensor '", name, "' holds ", dtype_name(value.dtype()),
             ", not floating-point weights");
  Tensor source = !dtype || *dtype == value.dtype() ? value : value.to(*dtype);
  TensorImpl& impl = param.impl();
  impl.storage = source.storage();
  impl.offset = source.offset();
  impl.strides = source.strides();
  impl.dtype = source.dtype();
}

// The ids generation stops after: generation_config.json's eos_token_id (a
// number or a list; `generation` is that file, null where there is none),
// else config.json's; each must be a token of the model.
std::vector<int32_t> eos_ids_of(const json& config, const json& generation, const fs::path& dir, int64_t vocab_size) {
  json eos = config.value("eos_token_id", json());
  std::string source = "config.json";
  if (generation.is_object() && generation.contains("eos_token_id") && !generation["eos_token_id"].is_null())
    eos = generation["eos_token_id"], source = "generation_config.json";
  std::vector<int32_t> ids;
  for (const auto& e : eos.is_array() ? eos : json::array({eos})) {
    if (e.is_null()) continue;
    KILN_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() < vocab_size, dir.string(), "/",
               source, ": eos_token_id ", e.dump(), " is not a token of the model's ", vocab_size);
    ids.push_back(e.get<int32_t>());
  }
  return ids;
}

}  // namespace

std::optional<std::string> hf_folder(const std::string& spec) {
  if (spec.starts_with("ollama:")) return ollama_model_file(spec.substr(7));
  const size_t prefix = spec.starts_with("hf:") ? 3 : spec.starts_with("gguf:") ? 5 : 0;
  if (prefix == 0) return std::nullopt;
  std::string dir = spec.substr(prefix);
  // The shell leaves "~" after "hf:" alone; users write hf:~/models/x anyway.
  const char* home = std::getenv("HOME");
  if (dir.rfind("~/", 0) == 0 && home) dir = std::string(home) + dir.substr(1);
  return dir;
}

void apply_store_defaults(const std::string& spec, HfCausalLm& lm) {
  if (!spec.starts_with("ollama:")) return;
  OllamaDefaults d = ollama_model(spec.substr(7)).defaults;
  lm.sampling_defaults = merge_sampling(d.sampling, lm.sampling_defaults);
  lm.default_stop = std::move(d.stop);
  lm.default_system = std::move(d.system);
}

bool is_gguf_file(const std::string& path) { return fs::is_regular_file(path); }

std::string hf_folder_kind(const std::string& dir, const json& config) {
  const std::string kind = hf_model_kind(config);
  // A sentence-transformers folder around a causal LM (Qwen3-Embedding's says Qwen3ForCausalLM).
  if (kind == "causal" && !is_gguf_file(dir) && fs::exists(fs::path(dir) / "modules.json")) return "embedder";
  if (kind == "causal" && !is_gguf_file(dir) && is_qwen3_reranker_folder(dir, config)) return "classifier";
  return kind;
}

json read_hf_config(const std::string& dir) {
  if (is_gguf_file(dir)) return hf_config_from_gguf(GgufFile::open(dir));
  if (!fs::is_directory(dir))
    KILN_FAIL("hf:", dir, " is not a folder; download one with `huggingface-cli download ORG/NAME --local-dir DIR` "
              "on a machine with internet (docs/REAL_MODELS.md)");
  json config = read_json(fs::path(dir) / "config.json", "a Hugging Face model folder needs its config.json");
  if (!config.is_object() || !config.contains("model_type") || !config["model_type"].is_string())
    KILN_FAIL(dir, "/config.json has no \"model_type\" string, so the architecture is unknown");
  return config;
}

std::string hf_weights_hash(const std::string& dir) {
  uLong crc = crc32(0L, Z_NULL, 0);
  auto feed = [&](const void* p, size_t n) { crc = crc32_z(crc, static_cast<const Bytef*>(p), n); };
  std::map<std::string, Tensor> weights;
  if (is_gguf_file(dir)) {
    const GgufFile file = GgufFile::open(dir);
    for (const auto& t : file.header().tensors) weights.emplace(t.name, file.tensor(t.name));
  } else {
    weights = map_hf_weights(dir);
  }
  for (const auto& [name, t] : weights) {
    const std::string head = name + ":" + dtype_name(t.dtype()) + shape_str(t.shape());
    feed(head.data(), head.size());
    const Tensor c = t.contiguous();
    feed(c.data_ptr(), size_t(c.numel()) * dtype_size(c.dtype()));
  }
  char out[32];
  std::snprintf(out, sizeof out, "crc32:%08lx", static_cast<unsigned long>(crc));
  return out;
}

std::map<std::string, Tensor> map_hf_weights(const std::string& dir) {
  KILN_CHECK(!is_gguf_file(dir), dir, " is a GGUF file, not a Hugging Face folder; this step reads folders only");
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) return map_safetensors(single.string()).tensors;
  if (!fs::exists(index))
    KILN_FAIL(dir, " holds neither model.safetensors nor model.safetensors.index.json; Kiln reads safetensors "
              "weights only (pytorch_model.bin is pickle: convert it with transformers' save_pretrained)");
  const json j = read_json(index, "the index of the weight shards");
  KILN_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), index.string(), " has no \"weight_map\" object");
  std::map<std::string, std::string> shard_of;
  std::set<std::string> shards;
  for (const auto& [name, file] : j["weight_map"].items()) {
    KILN_CHECK(file.is_string() && file.get<std::string>().find('/') == std::string::npos, index.string(),
               ": the shard of '", name, "' is not a file name in the folder");
    shard_of[name] = file.get<std::string>();
    shards.insert(file.get<std::string>());
  }
  std::map<std::string, Tensor> all;
  for (const auto& shard : shards) {
    const fs::path path = fs::path(dir) / shard;
    if (!fs::exists(path)) KILN_FAIL(index.string(), " names shard ", shard, ", which is missing from the folder");
    for (auto& [name, t] : map_safetensors(path.string()).tensors) {
      auto it = shard_of.find(name);
      KILN_CHECK(it != shard_of.end() && it->second == shard, "shard ", shard, " holds '", name,
                 "', which the index places elsewhere or not at all");
      all.emplace(name, std::move(t));
    }
  }
  for (const auto& [name, shard] : shard_of)
    KILN_CHECK(all.count(name), "the index places '", name, "' in ", shard, ", which does not hold it");
  return all;
}

namespace {

// Kiln's quantized export (config.json's quantization_config, quant_method
// "kiln"): a matrix NAME is stored as NAME.qdata, NAME.scales and, with zero
// points, NAME.zeros, in Kiln's [out, in] layout; each is mapped, not copied.
void attach_quantized(nn::Module& model, const std::map<std::string, Tensor>& weights, std::set<std::string>& used,
                      const std::function<CheckpointName(const std::string&)>& checkpoint_name, const json& config,
                      const std::string& dir) {
  const json& qc = config["quantization_config"];
  const QuantFormat format = parse_quant_format(qc["format"].get<std::string>());
  const DType dtype = dtype_parse(qc.value("dtype", std::string("float32")));
  model.for_each_module([&](const std::string& prefix, nn::Module& m) {
    auto* w = dynamic_cast<nn::WeightModule*>(&m);
    if (!w || !w->weight.defined()) return;
    const std::string name = checkpoint_name(prefix + "weight").name;
    auto part = [&](const char* suffix, DType want, const Shape& shape) {
      auto it = weights.find(name + suffix);
      KILN_CHECK(it != weights.end(), dir, ": quantized '", name, "' lacks its ", suffix, " tensor");
      KILN_CHECK(it->second.dtype() == want && it->second.shape() == shape, dir, ": '", name, suffix, "' holds ",
                 dtype_name(it->second.dtype()), " ", shape_str(it->second.shape()), "; ",
                 quant_format_name(format), " weights of shape ", shape_str(w->weight.shape()), " need ",
                 dtype_name(want), " ", shape_str(shape));
      used.insert(it->first);
      return it->second;
    };
    if (!weights.count(name + ".qdata")) return;  // kept in float
    QuantizedMatrix q;
    q.format = format;
    q.rows = w->weight.size(0);
    q.cols = w->weight.size(1);
    q.dtype = dtype;
    q.data = part(".qdata", DType::u8, {q.rows, q.eight_bit() ? q.padded_cols() : q.padded_cols() / 2});
    q.scales = part(".scales", DType::f32, format == QuantFormat::int8 ? Shape{q.rows} : Shape{q.rows, q.blocks()});
    if (format == QuantFormat::int4_zero) q.zeros = part(".zeros", DType::u8, {q.rows, q.blocks()});
    w->set_quantized(std::make_shared<const QuantizedMatrix>(std::move(q)));
  });
}

// transformers 5 saves a mixture's experts fused: experts.gate_up_proj [E,
// 2I, H] (each expert's gate rows, then its up rows) and experts.down_proj
// [E, H, I]. Each expert's projections are views of them (no copy), named as
// Kiln's modules are ("experts.3.gate_proj.weight").
void split_fused_experts(std::map<std::string, Tensor>& weights, const std::string& dir) {
  std::vector<std::string> fused;
  for (const auto& [name, t] : weights)
    if (name.ends_with(".experts.gate_up_proj") || name.ends_with(".experts.down_proj")) fused.push_back(name);
  for (const std::string& name : fused) {
    const Tensor t = weights.at(name);
    const bool gate_up = name.ends_with(".gate_up_proj");
    KILN_CHECK(t.dim() == 3 && t.size(0) > 0 && (!gate_up || t.size(1) % 2 == 0), dir, ": '", name, "' has shape ",
               shape_str(t.shape()), "; fused experts are [experts, 2 x intermediate, hidden] or [experts, hidden, "
               "intermediate]");
    const std::string prefix = name.substr(0, name.rfind('.') + 1);  // "...mlp.experts."
    const int64_t half = t.size(1) / 2;
    for (int64_t e = 0; e < t.size(0); ++e) {
      const Tensor expert = t.slice(0, e, e + 1).reshape({t.size(1), t.size(2)});
      const std::string at = prefix + std::to_string(e);
      if (gate_up) {
        weights[at + ".gate_proj.weight"] = expert.slice(0, 0, half);
        weights[at + ".up_proj.weight"] = expert.slice(0, half, 2 * half);
      } else {
        weights[at + ".down_proj.weight"] = expert;
      }
    }
    weights.erase(name);
  }
}

// Points every parameter of `model` at its checkpoint tensor (of `weights`,
// from `dir`); any tensor left over that is not an ignorable buffer, or any
// parameter missing, is an error.
void attach(nn::Module& model, std::map<std::string, Tensor> weights, const std::string& dir, const json& config,
            const std::string& model_type, const std::function<CheckpointName(const std::string&)>& checkpoint_name,
            const std::function<bool(const std::string&)>& ignorable, std::optional<DType> dtype) {
  split_fused_experts(weights, dir);
  std::set<std::string> used;
  if (config.contains("quantization_config") && config["quantization_config"].is_object())
    attach_quantized(model, weights, used, checkpoint_name, config, dir);
  for (auto& [name, param] : model.named_parameters()) {
    const CheckpointName source = checkpoint_name(name);
    auto it = weights.find(source.name);
    if (it == weights.end() && source.name.rfind("transformer.", 0) == 0)  // GPT-2 files without the prefix
      it = weights.find(source.name.substr(12));
    if (it == weights.end()) it = weights.find(name);  // transformers 5's names where the hub's differ (Mixtral's)
    if (it == weights.end())
      KILN_FAIL(dir, ": the weights lack '", source.name, "', which a ", model_type, " model with this config.json needs");
    used.insert(it->first);
    Tensor p = param;
    adopt(p, source.transposed ? it->second.transpose(0, 1).contiguous() : it->second, source.name, dtype);
  }
  for (const auto& [name, t] : weights)
    if (!used.count(name) && !ignorable(name))
      KILN_FAIL(dir, ": the weights hold '", name, "', which a ", model_type,
                " model with this config.json has no place for (a different architecture or config?)");
  model.eval();
}

void attach_weights(nn::Module& model, const std::string& dir, const json& config, const std::string& model_type,
                    const std::function<CheckpointName(const std::string&)>& checkpoint_name,
                    const std::function<bool(const std::string&)>& ignorable, std::optional<DType> dtype) {
  attach(model, map_hf_weights(dir), dir, config, model_type, checkpoint_name, ignorable, dtype);
}

// A family's builder, with a config field of the wrong JSON type reported
// as a config.json error rather than as nlohmann's.
template <typename Build>
auto build_from_config(const Build& build, const json& config, const std::string& dir) {
  nn::MetaParametersGuard meta;  // the checkpoint provides the weights: no initialisation, no memory
  try {
    return build(config);
  } catch (const json::exception& e) {
    KILN_FAIL(dir, "/config.json: a field is missing or has the wrong type: ", e.what());
  }
}

// A causal LM saved with a sequence-classification head: transformers'
// <Arch>ForSequenceClassification.
bool is_sequence_classifier(const json& config) {
  if (!config.contains("architectures") || !config["architectures"].is_array()) return false;
  for (const auto& a : config["architectures"])
    if (a.is_string() && a.get<std::string>().ends_with("ForSequenceClassification")) return true;
  return false;
}

// The pad id of a causal LM's classifier: transformers pools each row at its
// last token that is not pad_token_id.
int64_t causal_pad_id(const json& config, const std::string& dir) {
  const json pad = config.value("pad_token_id", json());
  KILN_CHECK(pad.is_number_integer() && pad.get<int64_t>() >= 0, dir, "/config.json: a sequence classifier on a "
             "causal LM needs pad_token_id (the token after each text's last), got ", pad.dump());
  return pad.get<int64_t>();
}

}  // namespace

// A GGUF file's vocabulary as the tokenizer.json it stands for (kiln/text/gguf_vocab.h).
static text::HfTokenizer gguf_tokenizer(const GgufFile& file, const std::string& path) {
  return text::HfTokenizer::from_json(text::gguf_vocab(file.metadata()).tokenizer, path);
}

text::HfTokenizer load_hf_tokenizer(const std::string& dir) {
  if (is_gguf_file(dir)) return gguf_tokenizer(GgufFile::open(dir), dir);
  return text::HfTokenizer::from_file((fs::path(dir) / "tokenizer.json").string());
}

std::string hf_model_kind(const json& config) {
  const std::string type = config["model_type"].get<std::string>();
  if (find_causal_lm_family(type)) {
    if (is_sequence_classifier(config)) return "classifier";
    // <Arch>Model, the body alone: a decoder embedder (Qwen3-Embedding as transformers saves it); GPT-2's
    // GPT2LMHeadModel is its language model.
    const json archs = config.value("architectures", json::array());
    const bool bare = archs.is_array() && !archs.empty() && std::all_of(archs.begin(), archs.end(), [](const json& a) {
                        return a.is_string() && a.get<std::string>().ends_with("Model") &&
                               a.get<std::string>().find("LMHead") == std::string::npos;
                      });
    return bare ? "embedder" : "causal";
  }
  if (find_classifier_family(type)) {
    const json archs = config.value("architectures", json::array());
    const bool bare = archs.is_array() && !archs.empty() && std::all_of(archs.begin(), archs.end(), [](const json& a) {
      return a.is_string() && a.get<std::string>().ends_with("Model");
    });
    return bare ? "embedder" : "classifier";
  }
  KILN_FAIL("config.json: model_type '", type, "' is not an architecture Kiln supports (language models: ",
            supported_causal_lm_types(), "; classifiers: ", supported_classifier_types(), ")");
}

HfCausalLm load_hf_causal_lm(const std::string& dir, std::optional<DType> dtype) {
  if (is_gguf_file(dir)) return load_gguf_causal_lm(dir, dtype);
  HfCausalLm out;
  out.dir = dir;
  out.config = read_hf_config(dir);
  out.model_type = out.config["model_type"].get<std::string>();
  const CausalLmFamily* family = find_causal_lm_family(out.model_type);
  if (!family)
    KILN_FAIL(dir, "/config.json: model_type '", out.model_type, "' is not a causal language model Kiln supports (",
              supported_causal_lm_types(), ")");
  KILN_CHECK(hf_folder_kind(dir, out.config) != "embedder", dir, " holds an embedder (its architectures say ",
             out.config.value("architectures", json()).dump(),
             ", or sentence-transformers' modules.json is there): it "
             "embeds texts (kiln embed, /v1/embeddings of kiln serve) and does not generate");
  out.model = build_from_config(family->build, out.config, dir);
  out.tokenizer = load_hf_tokenizer(dir);
  attach_weights(*out.model, dir, out.config, out.model_type, family->checkpoint_name, family->ignorable, dtype);
  const fs::path g = fs::path(dir) / "generation_config.json";
  const json generation = fs::exists(g) ? read_json(g, "generation settings") : json();
  out.eos_ids = eos_ids_of(out.config, generation, dir, out.model->vocab_size());
  out.sampling_defaults = generation_config_sampling(generation, g.string());
  return out;
}

// A classifier over a loaded language model, its head `head` [labels, hidden] (a reranker's, from its file).
static std::shared_ptr<SequenceClassifier> classifier_over(std::shared_ptr<LanguageModel> body, const Tensor& head,
                                                           const json& config, const std::string& dir,
                                                           const std::string& model_type, std::optional<DType> dtype) {
  Generator unused(0);  // the file provides the head
  auto model = build_from_config(
      [&](const json&) {
        return std::make_shared<CausalLmClassifier>(std::move(body), head.size(1), head.size(0), 0.02, unused);
      },
      config, dir);
  model->for_each_module([&](const std::string& prefix, nn::Module& m) {
    if (prefix == "score.") attach_mapped_weights(m, {{"weight", head}}, dir, model_type, dtype);
  });
  return model;
}

// Qwen3-Reranker's folder (prompt_reranker.h): the language model, and a head of its output's "yes" and "no" rows.
static HfClassifier load_qwen3_reranker_folder(const std::string& dir, std::optional<DType> dtype) {
  HfCausalLm lm = load_hf_causal_lm(dir, dtype);
  HfClassifier out;
  out.dir = dir;
  out.model_type = lm.model_type;
  out.labels = {kQwen3RerankLabels[0], kQwen3RerankLabels[1]};
  std::vector<int64_t> rows;
  for (const std::string& label : out.labels) {
    const std::optional<int32_t> id = lm.tokenizer.token_to_id(label);
    KILN_CHECK(id, dir, ": a Qwen3-Reranker's tokenizer needs the token '", label, "', whose output row scores it");
    rows.push_back(*id);
  }
  Tensor output;  // [vocab, hidden]: lm_head's, or the embedding's where they are tied
  for (const auto& [name, p] : lm.model->named_parameters())
    if (name == "lm_head.weight" || (!output.defined() && name == "model.embed_tokens.weight")) output = p;
  KILN_CHECK(output.defined(), dir, ": the model has no output layer to read 'yes' and 'no' from");
  const Tensor head = to_dtype(embedding(output, Tensor::from_vector(rows, {2}).to(output.device())), DType::f32);
  const json pad = lm.config.value("pad_token_id", json());
  out.pad_id = pad.is_number_integer() ? pad.get<int64_t>() : lm.eos_ids.empty() ? 0 : lm.eos_ids.front();
  out.tokenizer = std::move(lm.tokenizer);
  out.model = classifier_over(lm.model, head, lm.config, dir, out.model_type, dtype);
  out.rerank_prompt = kQwen3RerankPrompt;
  return out;
}

HfClassifier load_hf_classifier(const std::string& dir, std::optional<DType> dtype) {
  HfClassifier out;
  out.dir = dir;
  std::optional<GgufFile> gguf;  // a reranker's GGUF file (gguf_encoder.h), read once
  if (is_gguf_file(dir)) gguf.emplace(GgufFile::open(dir));
  const json config = gguf ? hf_config_from_gguf(*gguf) : read_hf_config(dir);
  out.model_type = config["model_type"].get<std::string>();
  if (!gguf && !is_sequence_classifier(config) && is_qwen3_reranker_folder(dir, config))
    return load_qwen3_reranker_folder(dir, dtype);
  out.tokenizer = gguf ? gguf_tokenizer(*gguf, dir) : load_hf_tokenizer(dir);
  if (const CausalLmFamily* lm = find_causal_lm_family(out.model_type); lm && is_sequence_classifier(config)) {
    out.labels = classifier_labels(config, out.model_type);
    out.pad_id = causal_pad_id(config, dir);
    // The head reads hidden states only: built tied, the body has no lm_head
    // to look for (the folder holds none).
    json body = config;
    body["tie_word_embeddings"] = true;
    if (gguf) {  // a reranker's file (Qwen3-Reranker's): the body as a language model's, the head its cls.output
      out.model = classifier_over(load_gguf_language_model(*gguf, dtype), gguf_classifier_head(*gguf), body, dir,
                                  out.model_type, dtype);
      out.rerank_prompt = text::gguf_chat_template(gguf->metadata()).rerank;
      return out;
    }
    const int64_t hidden = config.value("hidden_size", config.value("n_embd", int64_t(0)));
    const int64_t labels = int64_t(out.labels.size());
    Generator unused(0);  // the checkpoint provides the head
    out.model = build_from_config(
        [&](const json& j) { return std::make_shared<CausalLmClassifier>(lm->build(j), hidden, labels, 0.02, unused); },
        body, dir);
    attach_weights(*out.model, dir, config, out.model_type, [lm](const std::string& p) {
      return p.starts_with("model.") ? lm->checkpoint_name(p.substr(6)) : CheckpointName{p};  // the head: score.weight
    }, lm->ignorable, dtype);
    return out;
  }
  const ClassifierFamily* family = find_classifier_family(out.model_type);
  if (!family)
    KILN_FAIL(dir, "/config.json: model_type '", out.model_type, "' is not a sequence classifier Kiln supports (",
              supported_classifier_types(), ")");
  out.model = build_from_config(family->build, config, dir);
  if (gguf) {  // the encoder's names bare, the head's as BertModel's pooler and the classifier (gguf_encoder_names.h)
    attach(
        *out.model, gguf_encoder_weights(*gguf), dir, config, out.model_type,
        [](const std::string& p) { return CheckpointName{p.starts_with("bert.") ? p.substr(5) : p}; },
        family->ignorable, dtype);
  } else {
    attach_weights(
        *out.model, dir, config, out.model_type, [](const std::string& p) { return CheckpointName{p}; },
        family->ignorable, dtype);
  }
  out.labels = classifier_labels(config, out.model_type);
  out.pad_id = out.tokenizer.token_to_id("[PAD]").value_or(0);
  return out;
}

HfEncoder load_hf_encoder(const std::string& dir, std::optional<DType> dtype) {
  HfEncoder out;
  out.dir = dir;
  std::optional<GgufFile> gguf;  // a GGUF file is read once, for its config, vocabulary and tensors
  if (is_gguf_file(dir)) gguf.emplace(GgufFile::open(dir));
  out.config = gguf ? hf_config_from_gguf(*gguf) : read_hf_config(dir);
  out.model_type = out.config["model_type"].get<std::string>();
  if (const CausalLmFamily* lm = find_causal_lm_family(out.model_type)) {  // a decoder embedder
    KILN_CHECK(hf_folder_kind(dir, out.config) == "embedder", dir,
               " is not an encoder Kiln embeds with: it is a causal language "
               "model (a decoder embedder's folder has sentence-transformers' modules.json, or says <Arch>Model; its "
               "GGUF file names a pooling_type)");
    out.tokenizer = gguf ? gguf_tokenizer(*gguf, dir) : load_hf_tokenizer(dir);
    const json pad = out.config.value("pad_token_id", json());
    const int64_t width = out.config.value("hidden_size", int64_t(0)),
                  pad_id = pad.is_number_integer() ? pad.get<int64_t>() : 0;
    if (gguf) {
      out.model = std::make_shared<LanguageModelEncoder>(load_gguf_language_model(*gguf, dtype), width, pad_id);
      return out;
    }
    json body = out.config;
    body["tie_word_embeddings"] = true;  // the body alone: its hidden states are pooled, no head reads them
    out.model = std::make_shared<LanguageModelEncoder>(build_from_config(lm->build, body, dir), width, pad_id);
    std::map<std::string, Tensor> weights = map_hf_weights(dir);
    // transformers' <Arch>Model saves the body bare ("layers.0..."), <Arch>ForCausalLM under "model.".
    const bool bare =
        std::none_of(weights.begin(), weights.end(), [](const auto& w) { return w.first.starts_with("model."); });
    attach(
        *out.model, std::move(weights), dir, out.config, out.model_type,
        [lm, bare](const std::string& p) {
          CheckpointName n = lm->checkpoint_name(p.substr(6));  // the encoder keeps the body under "model."
          if (bare && n.name.starts_with("model.")) n.name = n.name.substr(6);
          return n;
        },
        [lm](const std::string& t) { return lm->ignorable(t) || t == "lm_head.weight"; }, dtype);
    return out;
  }
  const ClassifierFamily* family = find_classifier_family(out.model_type);
  if (!family)
    KILN_FAIL(dir, "/config.json: model_type '", out.model_type, "' is not an encoder Kiln embeds with (",
              supported_classifier_types(), ")");
  out.model = build_from_config(family->build_encoder, out.config, dir);
  out.tokenizer = gguf ? gguf_tokenizer(*gguf, dir) : load_hf_tokenizer(dir);
  // BertModel's names, or a classifier's with its base before them ("bert.embeddings...").
  std::map<std::string, Tensor> weights = gguf ? gguf_encoder_weights(*gguf) : map_hf_weights(dir);
  const bool bare = weights.contains(out.model->named_parameters().front().first);
  const std::string base = bare ? "" : family->base + ".";
  attach(*out.model, std::move(weights), dir, out.config, out.model_type,
         [base](const std::string& p) { return CheckpointName{base + p}; },
         [family, base](const std::string& t) {
           return family->ignorable(t) || !t.starts_with(base) || t.starts_with(base + "pooler.");
         },
         dtype);
  return out;
}

void attach_mapped_weights(nn::Module& model, std::map<std::string, Tensor> weights, const std::string& source,
                           const std::string& model_type, std::optional<DType> dtype) {
  attach(model, std::move(weights), source, json::object(), model_type,
         [](const std::string& p) { return CheckpointName{p}; }, [](const std::string&) { return false; }, dtype);
}

std::vector<double> classify_text(HfClassifier& c, const std::string& text) {
  NoGradGuard ng;
  const auto ids = c.tokenizer.encode(text);
  std::vector<int64_t> ids64(ids.begin(), ids.end());
  const Device device = c.model->parameters().front().device();
  Tensor logits = c.model->forward(Tensor::from_vector(ids64, {1, int64_t(ids64.size())}).to(device),
                                   {int64_t(ids64.size())});
  Tensor probs = softmax(to_dtype(logits, DType::f32), -1);
  const auto v = probs.to_vector<float>();
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace kiln::models
