// Tests that compare with PyTorch skip where Debian's python3-torch is
// missing, except under CI (CI=true) or KILN_REQUIRE_TORCH=1 (set by
// scripts/test.sh): there a missing torch must fail the run, since ctest
// counts a skip as green.
#pragma once
#include <cstdlib>
#include <string>

namespace kiln::testing {

// Debian's torch is importable only by the system python, not by a
// pyenv/venv python3 that may come first on PATH.
constexpr const char* kPython = "/usr/bin/python3";

inline bool torch_is_required() {
  const char* ci = std::getenv("CI");
  const char* required = std::getenv("KILN_REQUIRE_TORCH");
  return (ci && std::string(ci) == "true") || (required && std::string(required) == "1");
}

inline bool torch_is_importable() {
  return std::system((std::string(kPython) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
}

}  // namespace kiln::testing

// In a TEST body: skip (or, where torch is required, fail) when torch is missing.
#define KILN_SKIP_OR_FAIL_WITHOUT_TORCH(what)                                                            \
  do {                                                                                                  \
    if (!::kiln::testing::torch_is_importable()) {                                                      \
      if (::kiln::testing::torch_is_required())                                                         \
        FAIL() << ::kiln::testing::kPython << " cannot import torch, but CI/KILN_REQUIRE_TORCH requires " \
               << what << ". Install Debian's python3-torch (scripts/install_deps.sh does).";          \
      GTEST_SKIP() << ::kiln::testing::kPython << " cannot import torch, so " << what                   \
                   << " cannot run. Install Debian's python3-torch (scripts/install_deps.sh does).";     \
    }                                                                                                   \
  } while (0)
