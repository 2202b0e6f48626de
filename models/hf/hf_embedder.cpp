#include "models/hf/hf_embedder.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include "kiln/core/error.h"
#include "kiln/io/gguf.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/text_file.h"
#include "models/hf/gguf_model.h"

namespace kiln::models {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The pooling of 1_Pooling/config.json: sentence-transformers 5+'s
// "pooling_mode" ("mean", or a list of one), or the older pooling_mode_* flags
// the hub's folders carry (all-MiniLM-L6-v2's), exactly one of them on.
Pooling read_pooling(const fs::path& config_path) {
  const json c = read_json_file(config_path);
  KILN_CHECK(c.is_object(), config_path.string(), " must be a JSON object");
  static const std::map<std::string, std::string> legacy = {
      {"pooling_mode_cls_token", "cls"},         {"pooling_mode_mean_tokens", "mean"},
      {"pooling_mode_max_tokens", "max"},        {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"},
      {"pooling_mode_lasttoken", "lasttoken"},   {"pooling_mode_weightedmean_tokens", "weightedmean"}};
  std::vector<std::string> on;
  if (c.contains("pooling_mode")) {
    const json& mode = c["pooling_mode"];
    for (const json& m : mode.is_array() ? mode : json::array({mode})) {
      KILN_CHECK(m.is_string(), config_path.string(), ": pooling_mode ", mode.dump(), " is not a mode name");
      on.push_back(m.get<std::string>());
    }
  } else {
    for (const auto& [key, mode] : legacy)
      if (c.value(key, json(false)) == json(true)) on.push_back(mode);
  }
  KILN_CHECK(on.size() == 1, config_path.string(), ": ", on.size(), " pooling modes are on; Kiln pools with exactly "
             "one (sentence-transformers concatenates several)");
  static const std::map<std::string, Pooling> modes = {{"cls", Pooling::cls},
                                                        {"mean", Pooling::mean},
                                                        {"max", Pooling::max},
                                                        {"mean_sqrt_len_tokens", Pooling::mean_sqrt_len},
                                                        {"lasttoken", Pooling::last_token}};
  const auto it = modes.find(on[0]);
  KILN_CHECK(it != modes.end(), config_path.string(), ": pooling mode \"", on[0], "\" is not one Kiln computes "
             "(it computes cls, mean, max, mean_sqrt_len_tokens and lasttoken)");
  KILN_CHECK(c.value("include_prompt", json(true)) == json(true), config_path.string(),
             ": include_prompt false (pooling without the prompt's tokens) is not implemented");
  return it->second;
}

// A GGUF encoder's <arch>.pooling_type, llama.cpp's numbers (its converter writes sentence-transformers'
// Pooling module's mode there): 1 mean, 2 [CLS], 3 the last token. None given: mean, as a bare BertModel.
Pooling gguf_pooling(const json& metadata) {
  const std::string key = metadata.value("general.architecture", std::string()) + ".pooling_type";
  const json type = metadata.value(key, json(1));
  static const std::map<int64_t, Pooling> kinds = {{1, Pooling::mean}, {2, Pooling::cls}, {3, Pooling::last_token}};
  const auto it = type.is_number_integer() ? kinds.find(type.get<int64_t>()) : kinds.end();
  KILN_CHECK(it != kinds.end(), "GGUF: ", key, " is ", type.dump(),
             "; Kiln pools embeddings by 1 (mean), 2 (cls) or 3 (last token)");
  return it->second;
}

// A Dense module's activation by its class, as sentence-transformers names it (absent: its default, Tanh).
float (*dense_activation(const json& c, const fs::path& config_path))(float) {
  static const std::map<std::string, float (*)(float)> activations = {
      {"torch.nn.modules.linear.Identity", nullptr},
      {"torch.nn.modules.activation.Tanh", [](float x) { return std::tanh(x); }},
      {"torch.nn.modules.activation.ReLU", [](float x) { return std::max(x, 0.0f); }},
      {"torch.nn.modules.activation.Sigmoid", [](float x) { return 1 / (1 + std::exp(-x)); }},
      {"torch.nn.modules.activation.GELU", [](float x) { return 0.5f * x * (1 + std::erf(x / std::sqrt(2.0f))); }}};
  const json name = c.value("activation_function", json("torch.nn.modules.activation.Tanh"));
  const auto it = name.is_string() ? activations.find(name.get<std::string>()) : activations.end();
  if (it == activations.end()) {
    std::string known;
    for (const auto& [n, f] : activations) known += (known.empty() ? "" : ", ") + n;
    KILN_FAIL(config_path.string(), ": activation_function ", name.dump(), " is not one Kiln computes (", known, ")");
  }
  return it->second;
}

// A Dense module's folder: config.json and the linear layer's weights (model.safetensors), taking `width` inputs.
DenseProjection read_dense(const fs::path& module_dir, int64_t width) {
  const fs::path config_path = module_dir / "config.json";
  const json c = read_json_file(config_path);
  KILN_CHECK(c.is_object(), config_path.string(), " must be a JSON object");
  auto features = [&](const char* key) {
    const json n = c.value(key, json());
    KILN_CHECK(n.is_number_integer() && n.get<int64_t>() > 0 && n.get<int64_t>() <= (int64_t(1) << 20),
               config_path.string(), ": ", key, " is ", n.dump(), "; expected a positive width");
    return n.get<int64_t>();
  };
  DenseProjection d;
  d.in = features("in_features"), d.out = features("out_features");
  KILN_CHECK(d.in == width, config_path.string(), ": in_features is ", d.in, ", but the embedding before it is ", width,
             " wide");
  KILN_CHECK(c.value("use_residual", json(false)) == json(false), config_path.string(),
             ": use_residual true (a residual around the projection) is not implemented");
  for (const char* key : {"module_input_name", "module_output_name"})
    KILN_CHECK(c.value(key, json("sentence_embedding")) == json("sentence_embedding"), config_path.string(), ": ", key,
               " ", c[key].dump(), " is not implemented (Kiln projects the sentence embedding)");
  d.activation = dense_activation(c, config_path);
  const fs::path weights = module_dir / "model.safetensors";
  KILN_CHECK(fs::exists(weights), module_dir.string(),
             " has no model.safetensors (Kiln reads no pickled "
             "pytorch_model.bin; save the model again with sentence-transformers, which writes safetensors)");
  const SafetensorsFile f = load_safetensors(weights.string());
  auto values = [&](const std::string& name, const Shape& shape) {
    const auto it = f.tensors.find(name);
    KILN_CHECK(it != f.tensors.end() && it->second.shape() == shape, weights.string(), ": ", name, " must be a ",
               shape_str(shape), " tensor");
    return to_dtype(it->second, DType::f32).to_vector<float>();
  };
  d.weight = values("linear.weight", {d.out, d.in});
  if (c.value("bias", json(true)) == json(true)) d.bias = values("linear.bias", {d.out});
  return d;
}

// A GGUF embedder's projections (dense_2, dense_3: EmbeddingGemma's Dense modules as llama.cpp's converter writes
// them, identity activations), in order; none where the file has none.
std::vector<DenseProjection> gguf_dense(const GgufFile& file, int64_t width) {
  std::vector<DenseProjection> out;
  for (const std::string name : {"dense_2", "dense_3"}) {
    const GgufTensorInfo* w = file.find(name + ".weight");
    if (!w) continue;
    KILN_CHECK(w->dims.size() == 2 && w->dims[0] == width, "GGUF: ", name, ".weight must be a matrix taking the ",
               width, "-wide embedding");
    DenseProjection d;
    d.in = w->dims[0], d.out = w->dims[1];
    d.weight = gguf_f32_tensor(file, *w).to_vector<float>();
    if (const GgufTensorInfo* b = file.find(name + ".bias")) {
      KILN_CHECK(b->dims.size() == 1 && b->dims[0] == d.out, "GGUF: ", name, ".bias must hold ", d.out, " values");
      d.bias = gguf_f32_tensor(file, *b).to_vector<float>();
    }
    width = d.out;
    out.push_back(std::move(d));
  }
  return out;
}

// config_sentence_transformers.json's prompts, and its default one.
void read_prompts(const fs::path& dir, HfEmbedder& e) {
  const fs::path path = dir / "config_sentence_transformers.json";
  if (!fs::exists(path)) return;
  const json c = read_json_file(path);
  KILN_CHECK(c.is_object(), path.string(), " must be a JSON object");
  const json prompts = c.value("prompts", json::object());
  KILN_CHECK(prompts.is_object(), path.string(), ": prompts must map names to texts");
  for (const auto& [name, text] : prompts.items()) {
    KILN_CHECK(text.is_string(), path.string(), ": prompt \"", name, "\" is not a text");
    e.prompts[name] = text.get<std::string>();
  }
  const json name = c.value("default_prompt_name", json());
  if (name.is_null()) return;
  KILN_CHECK(name.is_string() && e.prompts.contains(name.get<std::string>()), path.string(), ": default_prompt_name ",
             name.dump(), " names none of its prompts");
  e.prompt = e.prompts[name.get<std::string>()];
}

// The module's last dotted name: "sentence_transformers.models.Pooling" -> "Pooling".
std::string module_kind(const json& module) {
  const std::string type = module.value("type", "");
  return type.substr(type.rfind('.') == std::string::npos ? 0 : type.rfind('.') + 1);
}

// model_max_length of tokenizer_config.json, when it holds a sane one.
std::optional<int64_t> tokenizer_max_length(const fs::path& dir) {
  if (!fs::exists(dir / "tokenizer_config.json")) return std::nullopt;
  const json t = read_json_file(dir / "tokenizer_config.json");
  const json n = t.is_object() ? t.value("model_max_length", json()) : json();
  if (!n.is_number_integer() || n.get<int64_t>() <= 0 || n.get<int64_t>() > (int64_t(1) << 30)) return std::nullopt;
  return n.get<int64_t>();
}

}  // namespace

HfEmbedder load_hf_embedder(const std::string& dir_name, std::optional<DType> dtype) {
  const fs::path dir(dir_name);
  HfEmbedder e;
  e.encoder = load_hf_encoder(dir_name, dtype);
  e.pad_id = e.encoder.model->pad_id();
  const int64_t positions = e.encoder.model->max_tokens();
  e.max_tokens = std::min(positions, tokenizer_max_length(dir).value_or(positions));
  if (is_gguf_file(dir_name)) {  // pooled as llama.cpp pools it, normalised as llama-server's embeddings are
    const GgufFile file = GgufFile::open(dir_name);
    e.pooling = gguf_pooling(file.metadata());
    e.dense = gguf_dense(file, e.encoder.model->width());
    e.normalize = true;
    return e;
  }
  read_prompts(dir, e);
  if (!fs::exists(dir / "modules.json")) return e;  // a bare encoder: mean pooling, as SentenceTransformer(dir) adds
  const json modules = read_json_file(dir / "modules.json");
  KILN_CHECK(modules.is_array() && !modules.empty(), (dir / "modules.json").string(), " must list the modules");
  bool pooled = false;
  for (size_t i = 0; i < modules.size(); ++i) {
    const json& m = modules[i];
    KILN_CHECK(m.is_object() && m.value("path", json()).is_string(), (dir / "modules.json").string(), ": module ", i,
               " needs a \"type\" and a \"path\"");
    const std::string kind = module_kind(m), path = m["path"].get<std::string>();
    KILN_CHECK(path.find("..") == std::string::npos, (dir / "modules.json").string(), ": module path \"", path,
               "\" leaves the folder");
    if (i == 0) {
      KILN_CHECK(kind == "Transformer", (dir / "modules.json").string(), ": the first module is ", m.value("type", ""),
                 "; Kiln embeds with a Transformer module first");
      if (fs::exists(dir / path / "sentence_bert_config.json")) {
        const json s = read_json_file(dir / path / "sentence_bert_config.json");
        KILN_CHECK(s.is_object(), "sentence_bert_config.json must be a JSON object");
        KILN_CHECK(s.value("do_lower_case", json(false)) == json(false),
                   "sentence_bert_config.json: do_lower_case true (lower-casing before the tokenizer) is not implemented");
        const json n = s.value("max_seq_length", json());
        if (!n.is_null()) {
          KILN_CHECK(n.is_number_integer() && n.get<int64_t>() > 0, "sentence_bert_config.json: max_seq_length ",
                     n.dump(), " is not a positive integer");
          e.max_tokens = std::min(positions, n.get<int64_t>());
        }
      }
    } else if (kind == "Pooling" && !pooled) {
      e.pooling = read_pooling(dir / path / "config.json");
      pooled = true;
    } else if (kind == "Dense" && pooled && !e.normalize) {
      e.dense.push_back(read_dense(dir / path, e.dimensions()));
    } else if (kind == "Normalize" && pooled) {
      e.normalize = true;
    } else {
      KILN_FAIL((dir / "modules.json").string(), ": module ", i, " (", m.value("type", "?"),
                ") is not one Kiln computes: it embeds with Transformer, then Pooling, then any Dense, then optionally "
                "Normalize");
    }
  }
  KILN_CHECK(pooled, (dir / "modules.json").string(), " has no Pooling module");
  return e;
}

const std::string& prompt_named(const HfEmbedder& e, const std::string& name) {
  const auto it = e.prompts.find(name);
  if (it == e.prompts.end()) {
    std::string names;
    for (const auto& [n, text] : e.prompts) names += (names.empty() ? "" : ", ") + n;
    KILN_FAIL("embeddings: the model has no prompt named \"", name, "\" (",
              names.empty() ? std::string("it has none") : "it has " + names, ")");
  }
  return it->second;
}

void use_prompt(HfEmbedder& e, const std::string& name) { e.prompt = prompt_named(e, name); }

std::vector<int32_t> embedding_ids(const HfEmbedder& e, const std::string& text) {
  return embedding_ids(e, text, e.prompt, nullptr);
}

std::vector<int32_t> embedding_ids(const HfEmbedder& e, const std::string& text, const std::string& prompt,
                                   int64_t* uncut_length) {
  const text::HfTokenizer& tok = e.encoder.tokenizer;
  const std::string prompted = prompt + text;  // sentence-transformers tokenizes the two as one text
  std::vector<int32_t> full = tok.encode(prompted);
  if (uncut_length) *uncut_length = int64_t(full.size());
  if (int64_t(full.size()) <= e.max_tokens) return full;
  // As the tokenizer truncates one sequence: its content, keeping the special tokens around it.
  const std::vector<int32_t> content = tok.encode(prompted, false);
  const auto at = std::search(full.begin(), full.end(), content.begin(), content.end());
  KILN_CHECK(at != full.end(), "embeddings: the tokenizer's special tokens are not around the text's");
  const int64_t before = at - full.begin(), after = int64_t(full.size() - content.size()) - before;
  const int64_t kept = e.max_tokens - before - after;
  KILN_CHECK(kept > 0, "embeddings: max_seq_length ", e.max_tokens, " leaves no room for text");
  std::vector<int32_t> out(full.begin(), at + kept);
  out.insert(out.end(), full.end() - after, full.end());
  return out;
}

Tensor embed_ids(HfEmbedder& e, const std::vector<std::vector<int32_t>>& rows) {
  NoGradGuard ng;
  const int64_t B = int64_t(rows.size());
  KILN_CHECK(B > 0, "embeddings: no texts");
  std::vector<int64_t> lengths;
  for (const auto& r : rows) {
    KILN_CHECK(!r.empty() && int64_t(r.size()) <= e.max_tokens, "embeddings: a row of ", r.size(),
               " tokens; the model reads 1 to ", e.max_tokens);
    lengths.push_back(int64_t(r.size()));
  }
  const int64_t T = *std::max_element(lengths.begin(), lengths.end()), C = e.encoder.model->width();
  std::vector<int64_t> ids(size_t(B * T), e.pad_id);
  for (int64_t b = 0; b < B; ++b) std::copy(rows[size_t(b)].begin(), rows[size_t(b)].end(), ids.begin() + b * T);
  const Device device = e.encoder.model->parameters().front().device();
  const Tensor states = e.encoder.model->forward(Tensor::from_vector(ids, {B, T}).to(device), lengths);
  const std::vector<float> s = to_dtype(states, DType::f32).to(Device::cpu()).to_vector<float>();
  std::vector<float> out;
  out.reserve(size_t(B * e.dimensions()));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lengths[size_t(b)];
    std::vector<float> pooled(size_t(C), 0.0f);
    float* o = pooled.data();
    const float* row = s.data() + b * T * C;
    switch (e.pooling) {
      case Pooling::cls: std::copy(row, row + C, o); break;
      case Pooling::last_token: std::copy(row + (n - 1) * C, row + n * C, o); break;
      case Pooling::max:
        std::fill(o, o + C, -std::numeric_limits<float>::infinity());
        for (int64_t t = 0; t < n; ++t)
          for (int64_t i = 0; i < C; ++i) o[i] = std::max(o[i], row[t * C + i]);
        break;
      case Pooling::mean:
      case Pooling::mean_sqrt_len: {
        const float divisor = e.pooling == Pooling::mean ? float(n) : std::sqrt(float(n));
        for (int64_t t = 0; t < n; ++t)
          for (int64_t i = 0; i < C; ++i) o[i] += row[t * C + i];
        for (int64_t i = 0; i < C; ++i) o[i] /= divisor;
        break;
      }
    }
    for (const DenseProjection& d : e.dense) pooled = project(d, pooled);
    if (e.normalize) l2_normalize(pooled);
    out.insert(out.end(), pooled.begin(), pooled.end());
  }
  return Tensor::from_vector(out, {B, e.dimensions()});
}

std::vector<float> project(const DenseProjection& d, std::span<const float> x) {
  KILN_CHECK(int64_t(x.size()) == d.in, "embeddings: a ", x.size(), "-wide vector into a Dense module taking ", d.in);
  std::vector<float> y(size_t(d.out));
  for (int64_t r = 0; r < d.out; ++r) {
    const float* w = d.weight.data() + r * d.in;
    float sum = d.bias.empty() ? 0.0f : d.bias[size_t(r)];
    for (int64_t i = 0; i < d.in; ++i) sum += w[i] * x[size_t(i)];
    y[size_t(r)] = d.activation ? d.activation(sum) : sum;
  }
  return y;
}

void l2_normalize(std::span<float> v) {
  double squares = 0;
  for (float x : v) squares += double(x) * x;
  const float inverse = float(1.0 / std::max(std::sqrt(squares), 1e-12));
  for (float& x : v) x *= inverse;
}

void normalize_embedding(std::span<float> v, int norm) {
  double size = 0;
  if (norm == -1) return;
  if (norm == 0) {  // the largest |x| to 32760: an int16's range
    for (float x : v) size = std::max(size, double(std::abs(x)));
    size /= 32760.0;
  } else if (norm == 2) {
    for (float x : v) size += double(x) * x;
    size = std::sqrt(size);
  } else {
    KILN_CHECK(norm > 0, "embedding normalisation ", norm, ": use -1 (none), 0 (max |x|), 2 (Euclidean) or a p > 0");
    for (float x : v) size += std::pow(std::abs(double(x)), norm);
    size = std::pow(size, 1.0 / norm);
  }
  const float inverse = size > 0 ? float(1.0 / size) : 0.0f;
  for (float& x : v) x *= inverse;
}

std::vector<std::vector<float>> embed_texts(HfEmbedder& e, const std::vector<std::string>& texts) {
  constexpr size_t kBatch = 32;  // rows per pass: padding, and memory, stay bounded
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& text : texts) ids.push_back(embedding_ids(e, text));
  // Longest first, as sentence-transformers' encode() orders them: a batch pads to its longest row, so rows of
  // like lengths together pad little (each row's embedding is the one it gets alone).
  std::vector<size_t> order(texts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a].size() > ids[b].size(); });
  std::vector<std::vector<float>> out(texts.size());
  const size_t C = size_t(e.dimensions());
  for (size_t first = 0; first < order.size(); first += kBatch) {
    std::vector<std::vector<int32_t>> rows;
    for (size_t i = first; i < std::min(order.size(), first + kBatch); ++i) rows.push_back(ids[order[i]]);
    const std::vector<float> v = embed_ids(e, rows).to_vector<float>();
    for (size_t r = 0; r < rows.size(); ++r)
      out[order[first + r]].assign(v.begin() + long(r * C), v.begin() + long((r + 1) * C));
  }
  return out;
}

}  // namespace kiln::models
