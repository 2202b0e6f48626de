#include "models/hf/ollama_store.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/io/text_file.h"
#include "models/hf/sampling_defaults.h"

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
  d.sampling = ollama_sampling(params, where);
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

namespace {

// NAME's manifest, from the first store that holds it.
struct Manifest {
  json m;
  fs::path store, path;
};
Manifest find_manifest(const std::string& name) {
  const fs::path manifest = manifest_of(name);
  std::string looked;
  for (const fs::path& store : stores()) {
    const fs::path path = store / "manifests" / manifest;
    looked += (looked.empty() ? "" : ", ") + path.string();
    if (!fs::is_regular_file(path)) continue;
    json m = read_json_file(path.string());
    KILN_CHECK(m.is_object() && m.value("layers", json()).is_array(), path.string(), " is not an Ollama manifest");
    return {std::move(m), store, path};
  }
  KILN_FAIL("ollama:", name, " is not in Ollama's store (looked for ", looked, "); `ollama pull ", name,
            "` fetches it, or set OLLAMA_MODELS to the store's folder");
}

// A layer's blob, by its digest; "" if the manifest has no layer of that type.
std::string blob_of(const Manifest& manifest, const std::string& type) {
  for (const json& layer : manifest.m["layers"]) {
    if (!layer.is_object() || layer.value("mediaType", json()) != type) continue;
    const json given = layer.value("digest", json());
    const std::string digest = given.is_string() ? given.get<std::string>() : "";
    KILN_CHECK(digest.starts_with("sha256:") && digest.size() == 71 &&
                   digest.find_first_not_of("0123456789abcdef", 7) == std::string::npos,
               manifest.path.string(), "'s ", type, " layer has no sha256 digest");
    return (manifest.store / "blobs" / ("sha256-" + digest.substr(7))).string();
  }
  return "";
}

// The model layer's GGUF file, present; a LoRA adapter layer refused.
std::string model_file(const Manifest& manifest, const std::string& name) {
  KILN_CHECK(blob_of(manifest, "application/vnd.ollama.image.adapter").empty(), "ollama:", name,
             " applies a LoRA adapter layer, "
             "which Kiln does not read from Ollama's store: run its base model, or merge the adapter into it");
  const std::string file = blob_of(manifest, "application/vnd.ollama.image.model");
  KILN_CHECK(!file.empty(), manifest.path.string(), " names no model layer");
  KILN_CHECK(fs::is_regular_file(file), "ollama:", name, "'s model file ", file,
             " is missing from the store; `ollama pull ", name, "` fetches it again");
  return file;
}

}  // namespace

OllamaModel ollama_model(const std::string& name) {
  const Manifest manifest = find_manifest(name);
  OllamaModel out;
  out.file = model_file(manifest, name);
  if (const std::string params = blob_of(manifest, "application/vnd.ollama.image.params"); !params.empty()) {
    const json j = json::parse(small_blob(params, name), nullptr, false);
    KILN_CHECK(!j.is_discarded(), params, ", the params layer of ollama:", name, ", is not JSON");
    out.defaults = ollama_params(j, params);
  }
  if (const std::string system = blob_of(manifest, "application/vnd.ollama.image.system"); !system.empty())
    out.defaults.system = small_blob(system, name);
  return out;
}

std::string ollama_model_file(const std::string& name) { return model_file(find_manifest(name), name); }

}  // namespace kiln::models
