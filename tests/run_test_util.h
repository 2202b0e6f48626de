// Helpers for tests that train runs: a fresh directory per test.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

namespace kiln::testing {

// <build>/<group>/<name>, emptied.
// A capped ISA pass (tests/isa_tests.cmake) runs a test again, maybe beside
// the main pass: each pass gets its own directories.
inline std::filesystem::path fresh_test_dir(const std::string& group, const std::string& name) {
  const char* pass = std::getenv("KILN_MAX_ISA");
  std::filesystem::path p = std::filesystem::path(KILN_BINARY_DIR) / (pass ? group + "-" + pass : group) / name;
  std::filesystem::remove_all(p);
  return p;
}

}  // namespace kiln::testing
