#include "kiln/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <thread>

extern "C" void openblas_set_num_threads(int);

namespace kiln {

Backend* cpu_backend_instance() {
  static cpu::CpuBackend backend;
  return &backend;
}

namespace {
int g_threads = 0;
}

void set_num_threads(int n) {
  if (n <= 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
  g_threads = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int get_num_threads() { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

}  // namespace kiln
