#include "models/hf/ollama_store.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
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

// Where Ollama keeps its models: $OLLAMA_MODELS, else the user's, else the Linux service's.
std::vector<fs::path> stores() {
  if (const char* set = std::getenv("OLLAMA_MODELS"); set && *set) return {set};
  std::vector<fs::path> out;
  if (const char* home = std::getenv("HOME")) out.push_back(fs::path(home) / ".ollama/models");
  out.push_back("/usr/share/ollama/.ollama/models");
  return out;
}

}  // namespace

std::string ollama_model_file(const std::string& name) {
  const fs::path manifest = manifest_of(name);
  std::string looked;
  for (const fs::path& store : stores()) {
    const fs::path path = store / "manifests" / manifest;
    looked += (looked.empty() ? "" : ", ") + path.string();
    if (!fs::is_regular_file(path)) continue;
    const json m = read_json_file(path.string());
    KILN_CHECK(m.is_object() && m.value("layers", json()).is_array(), path.string(), " is not an Ollama manifest");
    std::string digest;
    for (const json& layer : m["layers"]) {
      const std::string type = layer.value("mediaType", "");
      KILN_CHECK(type != "application/vnd.ollama.image.adapter", "ollama:", name,
                 " applies a LoRA adapter layer, "
                 "which Kiln does not read from Ollama's store: run its base model, or merge the adapter into it");
      if (type == "application/vnd.ollama.image.model") digest = layer.value("digest", "");
    }
    KILN_CHECK(digest.starts_with("sha256:") && digest.size() == 71 &&
                   digest.find_first_not_of("0123456789abcdef", 7) == std::string::npos,
               path.string(), " names no model layer with a sha256 digest");
    const fs::path blob = store / "blobs" / ("sha256-" + digest.substr(7));
    KILN_CHECK(fs::is_regular_file(blob), "ollama:", name, "'s model file ", blob.string(),
               " is missing from the store; `ollama pull ", name, "` fetches it again");
    return blob.string();
  }
  KILN_FAIL("ollama:", name, " is not in Ollama's store (looked for ", looked, "); `ollama pull ", name,
            "` fetches it, or set OLLAMA_MODELS to the store's folder");
}

}  // namespace kiln::models
