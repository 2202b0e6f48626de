#include "models/hf/sampling_defaults.h"

#include <initializer_list>
#include <optional>
#include <utility>

#include "kiln/core/error.h"

namespace kiln::models {
namespace {

using json = nlohmann::json;

// Where each field lives in a folder's generation_config.json, in a GGUF
// file (the names convert_hf_to_gguf.py maps between: its Metadata.load)
// and in an Ollama Modelfile's params (its api.Options); null: not there.
struct SamplingKey {
  const char* generation_config;
  const char* gguf;
  const char* ollama;
  std::optional<double> SamplingFields::*real;
  std::optional<int64_t> SamplingFields::*integer;
};
const SamplingKey kKeys[] = {
    {"temperature", "general.sampling.temp", "temperature", &SamplingFields::temperature, nullptr},
    {"top_k", "general.sampling.top_k", "top_k", nullptr, &SamplingFields::top_k},
    {"top_p", "general.sampling.top_p", "top_p", &SamplingFields::top_p, nullptr},
    {"min_p", "general.sampling.min_p", "min_p", &SamplingFields::min_p, nullptr},
    {"repetition_penalty", "general.sampling.penalty_repeat", "repeat_penalty", &SamplingFields::repetition_penalty,
     nullptr},
    {"penalty_last_n", "general.sampling.penalty_last_n", "repeat_last_n", nullptr, &SamplingFields::repetition_window},
    {nullptr, nullptr, "presence_penalty", &SamplingFields::presence_penalty, nullptr},
    {nullptr, nullptr, "frequency_penalty", &SamplingFields::frequency_penalty, nullptr},
};

// Samplers Kiln does not run, named in f.unapplied where `j` turns one on (its value is not the one that is off).
void note_unapplied(const json& j, std::initializer_list<std::pair<const char*, double>> off, SamplingFields& f) {
  for (const auto& [key, value] : off)
    if (j.is_object() && j.contains(key) && j[key].is_number() && j[key] != value)
      f.unapplied.push_back(std::string(key) + " " + j[key].dump());
}

// The fields `j` holds under each key's name (`name_of`); null values are absent.
template <typename NameOf>
SamplingFields read_fields(const json& j, NameOf name_of, const std::string& where) {
  SamplingFields f;
  if (!j.is_object()) return f;
  for (const SamplingKey& k : kKeys) {
    const char* name = name_of(k);
    if (!name || !j.contains(name) || j[name].is_null()) continue;
    const json& v = j[name];
    KILN_CHECK(v.is_number() && (!k.integer || v.is_number_integer()), where, ": ", name, " is ", v.dump(), ", not ",
               k.integer ? "an integer" : "a number");
    if (k.real) f.*k.real = v.get<double>();
    if (k.integer) f.*k.integer = v.get<int64_t>();
  }
  // Each value as a sampler takes it, or the file is named.
  try {
    check_sampling(resolve_sampling(f, {}, Sampling{}));
  } catch (const Error& e) {
    KILN_FAIL(where, ": ", e.what());
  }
  return f;
}

}  // namespace

SamplingFields generation_config_sampling(const json& generation_config, const std::string& where) {
  SamplingFields f = read_fields(
      generation_config, [](const SamplingKey& k) { return k.generation_config; }, where);
  // vLLM reads GenerationConfig.to_diff_dict(): a value equal to transformers' default is not the model's own.
  if (f.top_k == 50) f.top_k.reset();
  f.repetition_window.reset();  // vLLM's penalty looks at the whole sequence
  return f;
}

SamplingFields gguf_sampling(const json& metadata, const std::string& where) {
  SamplingFields f = read_fields(
      metadata, [](const SamplingKey& k) { return k.gguf; }, where);
  // llama.cpp's penalty_last_n: -1 is the whole context, 0 turns the penalties off; its default is 64.
  if (!f.repetition_window) f.repetition_window = 64;
  // llama.cpp's samplers that Kiln does not run, when the file turns them on (their parameters go unsaid
  // without them; the order of general.sampling.sequence is llama.cpp's own).
  note_unapplied(metadata, {{"general.sampling.mirostat", 0}, {"general.sampling.xtc_probability", 0}}, f);
  return f;
}

SamplingFields ollama_sampling(const json& params, const std::string& where) {
  SamplingFields f = read_fields(
      params, [](const SamplingKey& k) { return k.ollama; }, where);
  // Ollama's repeat_last_n is 64 where the Modelfile does not say (-1: the whole context, 0: no penalty).
  if (f.repetition_penalty && !f.repetition_window) f.repetition_window = 64;
  note_unapplied(params, {{"mirostat", 0}, {"typical_p", 1}, {"tfs_z", 1}}, f);
  return f;
}

json gguf_sampling_metadata(const json& generation_config) {
  json m = json::object();
  if (!generation_config.is_object()) return m;
  for (const SamplingKey& k : kKeys)
    if (k.gguf && k.generation_config && generation_config.contains(k.generation_config) &&
        generation_config[k.generation_config].is_number())
      m[k.gguf] = generation_config[k.generation_config];
  return m;
}

json generation_config_of_gguf_sampling(const json& metadata) {
  json g = json::object();
  for (const SamplingKey& k : kKeys)
    if (k.gguf && k.generation_config && metadata.contains(k.gguf) && metadata[k.gguf].is_number())
      g[k.generation_config] = metadata[k.gguf];
  return g;
}

}  // namespace kiln::models
