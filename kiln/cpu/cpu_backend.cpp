#include "kiln/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <thread>

extern "C" void openblas_set_num_threads(int);

namespace kiln {

Backend* cpu_backend_instance() {
  static cpu::CpuBackend backend;
  return &backend;
}

namespace {
std::atomic<int> g_threads{0};  // read by threads that start later (use_num_threads_on_this_thread)
}

void set_num_threads(int n) {
  if (n <= 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
  g_threads = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int get_num_threads() {
  const int n = g_threads;
  return n > 0 ? n : omp_get_max_threads();
}

void use_num_threads_on_this_thread() {
  if (const int n = g_threads; n > 0) omp_set_num_threads(n);
}

}  // namespace kiln
