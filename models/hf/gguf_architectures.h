// The architectures Kiln reads from GGUF (general.architecture, as llama.cpp
// names them), a row each: the family row that builds the model, the names
// its tensors have in the file, and its metadata read as the config.json
// transformers would write for it, with llama.cpp's own defaults where the
// file leaves a value out (Gemma 3's sliding pattern of 6, SmolLM3's
// unrotated fourth layers, Gemma's attention scale).
#pragma once
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/io/gguf.h"
#include "models/llama/llama.h"

namespace kiln::models {

// The most layers a file's config may say: checked before the per-layer
// lists of that length are made (the fuzzer's find: 7 million layers'
// attention types, gigabytes of them).
inline constexpr int64_t kGgufMaxLayers = 4096;
// llama.cpp's pooling_type of a reranker (LLAMA_POOLING_TYPE_RANK).
inline constexpr int64_t kGgufRankPooling = 4;

// One architecture's metadata keys (`llama.block_count`, ...).
struct GgufMeta {
  const nlohmann::json& m;
  std::string p;
  bool has(const std::string& key) const { return m.contains(p + key); }
  const nlohmann::json& at(const std::string& key) const {
    KILN_CHECK(has(key), "GGUF: the file lacks '", p + key, "', which its architecture needs");
    return m[p + key];
  }
  int64_t positive(const std::string& key) const {
    const nlohmann::json& v = at(key);
    KILN_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, "GGUF: '", p + key, "' is ", v.dump(),
               "; expected a positive integer");
    return v.get<int64_t>();
  }
  double number(const std::string& key, double absent) const {
    if (!has(key)) return absent;
    KILN_CHECK(at(key).is_number(), "GGUF: '", p + key, "' is ", at(key).dump(), "; expected a number");
    return at(key).get<double>();
  }
  std::string text(const std::string& key, const std::string& absent) const {
    if (!has(key)) return absent;
    KILN_CHECK(at(key).is_string(), "GGUF: '", p + key, "' is ", at(key).dump(), "; expected a string");
    return at(key).get<std::string>();
  }
};

// What reading a file's config takes from it: the parsed header, and a small
// F32 vector's values (RoPE factors). A GgufFile gives both (below); the
// GGUF fuzzer gives bytes it parsed, so the config reading is fuzzed without
// a file or a tensor library.
struct GgufContents {
  const GgufHeader& header;
  std::function<std::vector<float>(const GgufTensorInfo&)> f32_values;
  const GgufTensorInfo* find(const std::string& name) const { return header.find(name); }

  // A whole file's bytes, parsed into `header` (which checked that each
  // tensor lies inside them): read where they are, as the GGUF fuzzer does.
  static GgufContents of_bytes(const GgufHeader& header, const uint8_t* bytes) {
    return {header, [&header, bytes](const GgufTensorInfo& t) {
              std::vector<float> values(t.bytes / sizeof(float));
              if (!values.empty())
                std::memcpy(values.data(), bytes + header.data_start + t.offset, values.size() * sizeof(float));
              return values;
            }};
  }
};

struct GgufArchitecture {
  std::string arch;             // general.architecture
  std::string model_type;       // the family row that builds it
  std::string hf_architecture;  // config.json's "architectures", for an export
  bool permuted_qk = false;     // llama.cpp's converter interleaves q and k's rotary halves (its LlamaModel's)
  bool routed = false;          // a mixture of experts: its files have expert_count (llama's with it are Mixtral's)
  float norm_offset = 0;        // Gemma's converter stores each norm's weight as 1 + w: subtracted at load
  // The tensors whose transformers names differ from the common table's (a layer's with blk.N. left off).
  std::map<std::string, std::string> names = {};
  std::string layer_prefix = "model.layers.";  // transformers' name of layer N is layer_prefix + "N." + ...
  // Its keys beyond the common ones, into `config`.
  void (*read_config)(const GgufContents& file, const GgufMeta& meta, nlohmann::json& config) = nullptr;
  // The inverse, for an export: a model's keys beyond the common ones into `metadata` (keys named
  // prefix + key); what llama.cpp fixes and the model does otherwise is an error naming it.
  void (*write_config)(const LlamaConfig& model, const std::string& prefix, nlohmann::json& metadata) = nullptr;
};

// The row of the file's architecture; one Kiln does not read is an error naming those it does.
const GgufArchitecture& gguf_architecture(const nlohmann::json& metadata);

// The transformers name of a tensor of the file (blk.N.attn_q.weight ->
// model.layers.N.self_attn.q_proj.weight; an expert tensor's name without
// its expert: model.layers.N.mlp.experts.gate_proj.weight), or "" for none.
std::string gguf_hf_name(const GgufArchitecture& arch, const std::string& gguf_name);

// The families Kiln writes as GGUF (the rows' and mistral), for messages.
std::string gguf_exportable_types();
// llama.cpp's converter stores q and k (permuted_qk) with each head's rows
// [first half, second half] interleaved (row 2i + j of a head holds the
// half-j row i): for each row of transformers' order, the file's row that
// holds it.
std::vector<int64_t> gguf_qk_file_rows(int64_t rows, int64_t heads);

// The row whose family is `model_type`, or null.
const GgufArchitecture* gguf_architecture_of_type(const std::string& model_type);
// The inverse of gguf_hf_name: a transformers name's name in the file, or "" for none.
std::string gguf_name_of(const GgufArchitecture& arch, const std::string& hf_name);

// Llama 3.1's RoPE divisors (rope_freqs.weight) for a head of `dim`, as
// llama.cpp's converter computes them from transformers' llama3 config.
std::vector<double> llama3_rope_divisors(double theta, int64_t dim, double factor, double low, double high,
                                         double original);

// The config.json of the model a GGUF file holds; an architecture Kiln does
// not read from GGUF, or a RoPE it cannot express, is an error naming it.
nlohmann::json hf_config_from_gguf(const GgufContents& file);
inline nlohmann::json hf_config_from_gguf(const GgufFile& file) {
  return hf_config_from_gguf(
      GgufContents{file.header(), [&file](const GgufTensorInfo& t) { return file.tensor(t.name).to_vector<float>(); }});
}

}  // namespace kiln::models
