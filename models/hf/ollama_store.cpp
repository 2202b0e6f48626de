#include "models/hf/ollama_store.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/io/text_file.h"

namespace kiln::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A part of a name as Ollama allows it (so that none leaves the store):
// a letter, digit or _ first, then those, - and . (no . in a namespace; a
// host may hold a port's :).
bool valid_part(const std::string& s, bool dots, bool colons) {
  if (s.empty() || s.size() > 350 || !(std::isalnum(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || (dots && c == '.') ||
          (colons && c == ':')))
      return false;
  return true;
}

// NAME's manifest, relative to the store's manifests/: host/namespace/model/tag.
fs::path manifest_of(const std::string& name) {
  std::string rest = name, tag = "latest";
  const size_t colon = rest.rfind(':'), slash = rest.rfind('/');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {  // ':' in a host is its port
    tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t slash = rest.find('/', at);
    parts.push_back(rest.substr(at, slash == std::string::npos ? std::string::npos : slash - at));
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  KILN_CHECK(parts.size() <= 3, "ollama:", name, " is not a model name ([HOST/][NAMESPACE/]MODEL[:TAG])");
  while (parts.size() < 3) parts.insert(parts.begin(), parts.size() == 2 ? "registry.ollama.ai" : "library");
  KILN_CHECK(valid_part(parts[0], true, true) && valid_part(parts[1], false, false) &&
                 valid_part(parts[2], true, false) && valid_part(tag, true, false),
             "ollama:", name,
             " is not a model name as Ollama spells them ([HOST/][NAMESPACE/]MODEL[:TAG]: letters, "
             "digits, _, - and .)");
  return fs::path(parts[0]) / parts[1] / parts[2] / tag;
}

// A layer's blob, bounded: params and system layers are a few hundred bytes.
std::string small_blob(const fs::path& blob, const std::string& name) {
  KILN_CHECK(fs::is_regular_file(blob), "ollama:", name, "'s layer ", blob.string(),
             " is missing from the store; `ollama pull ", name, "` fetches it again");
  KILN_CHECK(fs::file_size(blob) <= (1u << 20), blob.string(), " is ", fs::file_size(blob),
             " bytes, too large for the params or system layer of ollama:", name);
  return read_text_file(blob.string());
}

// Ollama's option names for the sampling fields (api.Options).
struct ParamKey {
  const char* name;
  std::optional<double> SamplingFields::*real;
  std::optional<int64_t> SamplingFields::*integer;
};
const ParamKey kParamKeys[] = {
    {"temperature", &SamplingFields::temperature, nullptr},
    {"top_k", nullptr, &SamplingFields::top_k},
    {"top_p", &SamplingFields::top_p, nullptr},
    {"min_p", &SamplingFields::min_p, nullptr},
    {"repeat_penalty", &SamplingFields::repetition_penalty, nullptr},
    {"repeat_last_n", nullptr, &SamplingFields::repetition_window},
    {"presence_penalty", &SamplingFields::presence_penalty, nullptr},
    {"frequency_penalty", &SamplingFields::frequency_penalty, nullptr},
};
// Ollama's samplers that Kiln does not run, and the value that turns each off.
const std::pair<const char*, double> kUnappliedParams[] = {{"mirostat", 0}, {"typical_p", 1}, {"tfs_z", 1}};

// Where Ollama keeps its models: $OLLAMA_MODELS, else the user's, else the Linux service's.
std::vector<fs::path> stores() {
  if (const char* set = std::getenv("OLLAMA_MODELS"); set && *set) return {set};
  std::vector<fs::path> out;
  if (const char* home = std::getenv("HOME")) out.push_back(fs::path(home) / ".ollama/models");
  out.push_back("/usr/share/ollama/.ollama/models");
  return out;
}

}  // namespace

OllamaDefaults ollama_params(const json& params, const std::string& where) {
  KILN_CHECK(params.is_object(), where, " is not a JSON object of Ollama parameters");
  OllamaDefaults d;
  for (const ParamKey& k : kParamKeys) {
    if (!params.contains(k.name) || params[k.name].is_null()) continue;
    const json& v = params[k.name];
    KILN_CHECK(v.is_number() && (!k.integer || v.is_number_integer()), where, ": ", k.name, " is ", v.dump(), ", not ",
               k.integer ? "an integer" : "a number");
    if (k.real) d.sampling.*k.real = v.get<double>();
    if (k.integer) d.sampling.*k.integer = v.get<int64_t>();
  }
  try {
    check_sampling(resolve_sampling(d.sampling, {}, Sampling{}));
  } catch (const Error& e) {
    KILN_FAIL(where, ": ", e.what());
  }
  // Ollama's repeat_last_n is 64 where the Modelfile does not say (-1: the whole context, 0: no penalty).
  if (d.sampling.repetition_penalty && !d.sampling.repetition_window) d.sampling.repetition_window = 64;
  for (const auto& [name, off] : kUnappliedParams)
    if (params.contains(name) && params[name].is_number() && params[name] != off)
      d.sampling.unapplied.push_back(std::string(name) + " " + params[name].dump());
  if (params.contains("stop")) {
    const json& stop = params["stop"];
    KILN_CHECK(stop.is_array() && stop.size() <= 64, where, ": stop is ", stop.dump().substr(0, 80),
               ", not a list of at most 64 strings");
    for (const json& s : stop) {
      KILN_CHECK(s.is_string() && !s.get<std::string>().empty(), where, ": stop holds ", s.dump().substr(0, 80),
                 ", not a string");
      d.stop.push_back(s.get<std::string>());
    }
  }
  return d;
}

OllamaModel ollama_model(const std::string& name) {
  const fs::path manifest = manifest_of(name);
  std::string looked;
  for (const fs::path& store : stores()) {
    const fs::path path = store / "manifests" / manifest;
    looked += (looked.empty() ? "" : ", ") + path.string();
    if (!fs::is_regular_file(path)) continue;
    const json m = read_json_file(path.string());
    KILN_CHECK(m.is_object() && m.value("layers", json()).is_array(), path.string(), " is not an Ollama manifest");
    // A layer's blob, by its digest; "" if the manifest has no layer of that type.
    auto blob_of = [&](const std::string& type) -> std::string {
      for (const json& layer : m["layers"]) {
        if (!layer.is_object() || layer.value("mediaType", json()) != type) continue;
        const json given = layer.value("digest", json());
        const std::string digest = given.is_string() ? given.get<std::string>() : "";
        KILN_CHECK(digest.starts_with("sha256:") && digest.size() == 71 &&
                       digest.find_first_not_of("0123456789abcdef", 7) == std::string::npos,
                   path.string(), "'s ", type, " layer has no sha256 digest");
        return (store / "blobs" / ("sha256-" + digest.substr(7))).string();
      }
      return "";
    };
    KILN_CHECK(blob_of("application/vnd.ollama.image.adapter").empty(), "ollama:", name,
               " applies a LoRA adapter layer, "
               "which Kiln does not read from Ollama's store: run its base model, or merge the adapter into it");
    OllamaModel out;
    out.file = blob_of("application/vnd.ollama.image.model");
    KILN_CHECK(!out.file.empty(), path.string(), " names no model layer");
    KILN_CHECK(fs::is_regular_file(out.file), "ollama:", name, "'s model file ", out.file,
               " is missing from the store; `ollama pull ", name, "` fetches it again");
    if (const std::string params = blob_of("application/vnd.ollama.image.params"); !params.empty()) {
      const std::string text = small_blob(params, name);
      const json j = json::parse(text, nullptr, false);
      KILN_CHECK(!j.is_discarded(), params, ", the params layer of ollama:", name, ", is not JSON");
      out.defaults = ollama_params(j, params);
    }
    if (const std::string system = blob_of("application/vnd.ollama.image.system"); !system.empty())
      out.defaults.system = small_blob(system, name);
    return out;
  }
  KILN_FAIL("ollama:", name, " is not in Ollama's store (looked for ", looked, "); `ollama pull ", name,
            "` fetches it, or set OLLAMA_MODELS to the store's folder");
}

std::string ollama_model_file(const std::string& name) { return ollama_model(name).file; }

}  // namespace kiln::models
