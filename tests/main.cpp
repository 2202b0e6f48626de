#include <gtest/gtest.h>

#include "kiln/backend/backend.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
