#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/text/models.h"

namespace kiln::text {

std::unordered_map<std::string, int32_t> read_vocab(const nlohmann::json& j, const char* model) {
  KILN_CHECK(j.contains("vocab") && j["vocab"].is_object(), "tokenizer.json: ", model, " has no \"vocab\" object");
  std::unordered_map<std::string, int32_t> vocab;
  for (const auto& [token, id] : j["vocab"].items()) vocab[token] = read_token_id(id, "vocab id of '" + token + "'");
  for (const auto& [token, id] : vocab)
    KILN_CHECK(size_t(id) < vocab.size() + kMaxIdGap, "tokenizer.json: vocab id ", id, " of '", token,
               "' is far beyond the vocabulary's ", vocab.size(), " entries");
  return vocab;
}

int32_t read_token_id(const nlohmann::json& id, const std::string& what) {
  KILN_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t(1) << 31),
             "tokenizer.json: ", what, " is ", id.dump(), ", not a non-negative 32-bit integer");
  return id.get<int32_t>();
}

size_t read_count(const nlohmann::json& j, const char* key, size_t fallback) {
  return j.contains(key) ? size_t(read_token_id(j[key], std::string("\"") + key + "\"")) : fallback;
}

std::vector<std::string> tokens_by_id(const std::unordered_map<std::string, int32_t>& vocab) {
  std::vector<std::string> out;
  for (const auto& [token, id] : vocab) {
    if (size_t(id) >= out.size()) out.resize(size_t(id) + 1);
    out[size_t(id)] = token;
  }
  return out;
}

}  // namespace kiln::text
