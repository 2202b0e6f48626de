// Shared helpers for the kiln/io tests: a scratch directory per test and raw
// file access, so tests can build and corrupt files byte by byte.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::io_test {

namespace fs = std::filesystem;

class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("kiln_io_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Names in a directory (default: the scratch dir), sorted.
  std::vector<std::string> listing(const std::string& sub = "") const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(sub.empty() ? dir_ : dir_ / sub))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from header text and data, laid out by hand: length,
// header padded with spaces to 8 bytes, then the data.
inline std::string make_safetensors(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return u64_le(header.size()) + header + data;
}

// Runs fn, expecting a kiln::Error whose message contains every needle.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error containing '" << *needles.begin() << "'";
  } catch (const kiln::Error& e) {
    std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

}  // namespace kiln::io_test
