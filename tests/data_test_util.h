// Helpers shared by the kiln/data tests (test_data.cpp, test_data_loader.cpp).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "kiln/core/error.h"
#include "kiln/data/fashion_mnist.h"

namespace kiln_data_test {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;  // inline function: one counter for the whole test binary
    path = fs::temp_directory_path() /
           ("kiln_test_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// Runs f, expects a kiln::Error, and returns its message.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a kiln::Error";
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The real Fashion-MNIST training set, read once per test binary.
inline const kiln::data::ImageDataset& real_train() {
  static const kiln::data::ImageDataset d =
      kiln::data::load_fashion_mnist(kiln::data::FashionMnistPart::train, kiln::data::kFashionMnistDefaultDir);
  return d;
}

}  // namespace kiln_data_test
