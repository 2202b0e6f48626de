#include "kiln/cpu/omp_policy.h"

#include <unistd.h>

#include <cstdlib>

namespace kiln {

void use_passive_openmp_waiting(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc): carry on with libgomp's default policy.
}

}  // namespace kiln
