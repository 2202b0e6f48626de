#include <gtest/gtest.h>

#include "kiln/backend/backend.h"
#include "kiln/cpu/omp_policy.h"

int main(int argc, char** argv) {
  kiln::use_passive_openmp_waiting(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
