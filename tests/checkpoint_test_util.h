// Bitwise comparison of checkpoint tensors, shared by the resume tests.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::testing {

inline void expect_bitwise_equal(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const Tensor& u = b.at(name);
    ASSERT_EQ(t.nbytes(), u.nbytes()) << name;
    EXPECT_EQ(std::memcmp(t.data_ptr(), u.data_ptr(), t.nbytes()), 0) << name << " differs";
  }
}

}  // namespace kiln::testing
