// Helpers for tests that train runs: a fresh directory per test.
#pragma once
#include <filesystem>
#include <string>

namespace kiln::testing {

// <build>/<group>/<name>, emptied.
inline std::filesystem::path fresh_test_dir(const std::string& group, const std::string& name) {
  std::filesystem::path p = std::filesystem::path(KILN_BINARY_DIR) / group / name;
  std::filesystem::remove_all(p);
  return p;
}

}  // namespace kiln::testing
