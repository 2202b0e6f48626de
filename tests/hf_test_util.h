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

}  // namespace kiln::hf_test
