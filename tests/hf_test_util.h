// Shared by the Hugging Face tests: the fixtures that tests/hf/make_fixtures.py
// made with transformers and tokenizers, and what those answered on them.
#pragma once
#include <gtest/gtest.h>

#include <fstream>
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

// A conversation as the fixtures write it: [{"role", "content"}, ...].
inline std::vector<text::ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<text::ChatMessage> ms;
  for (const auto& m : j) ms.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return ms;
}

}  // namespace kiln::hf_test
