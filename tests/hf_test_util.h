// Shared by the Hugging Face tests: the fixtures that tests/hf/make_fixtures.py
// made with transformers and tokenizers, and what those answered on them.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/text/chat_template.h"
#include "models/common/language_model.h"

namespace kiln::hf_test {

inline std::string fixture(const std::string& name) { return std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/" + name; }

inline nlohmann::json expected(const std::string& name) {
  std::ifstream in(fixture(name) + "/expected.json");
  EXPECT_TRUE(in) << "missing " << fixture(name) << "/expected.json: run tests/hf/make_fixtures.py";
  return nlohmann::json::parse(in);
}

// A copy of fixture `name` at `dir` (what was there is replaced), for a test to change.
inline std::filesystem::path copy_fixture(const std::string& name, const std::filesystem::path& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir.parent_path());
  std::filesystem::copy(fixture(name), dir, std::filesystem::copy_options::recursive);
  return dir;
}

// Rewrites dir/config.json through `edit`.
inline void edit_config(const std::filesystem::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  edit(j);
  std::ofstream(dir / "config.json") << j.dump();
}

// A conversation as the fixtures write it: [{"role", "content"}, ...].
inline std::vector<text::ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<text::ChatMessage> ms;
  for (const auto& m : j) ms.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return ms;
}

// log p(ids[t] | ids[<t]) for t >= 1, from one forward pass.
inline std::vector<double> logprobs(models::LanguageModel& model, const std::vector<int32_t>& ids) {
  const std::vector<float> v = models::next_token_log_probabilities(model, ids);
  const size_t V = v.size() / ids.size();
  std::vector<double> out;
  for (size_t t = 1; t < ids.size(); ++t) out.push_back(v[(t - 1) * V + size_t(ids[t])]);
  return out;
}

// The largest gap between `got` (log-probabilities from position 1) and the fixture's `want` (from position 0).
inline double worst_difference(const std::vector<double>& got, const nlohmann::json& want) {
  EXPECT_EQ(got.size() + 1, want.size());
  double worst = 0;
  for (size_t t = 0; t < got.size() && t + 1 < want.size(); ++t)
    worst = std::max(worst, std::abs(got[t] - want[t + 1].get<double>()));
  return worst;
}

}  // namespace kiln::hf_test
