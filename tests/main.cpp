#include <gtest/gtest.h>

#include "kiln/backend/backend.h"
#include "kiln/cpu/runtime_defaults.h"

int main(int argc, char** argv) {
  kiln::apply_runtime_defaults(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
