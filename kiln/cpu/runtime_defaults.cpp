#include "kiln/cpu/runtime_defaults.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kiln {

const char* openblas_core_override() {
  const char* detected = openblas_get_corename();
  const std::string core = detected ? detected : "";
  // OpenBLAS's generic fallbacks for an x86-64 CPU it cannot place.
  if (core != "Prescott" && core != "Core2" && core != "Nehalem" && core != "Penryn" && core != "Dunnington")
    return nullptr;
#if defined(__x86_64__)
  __builtin_cpu_init();
  // (Not "COOPERLAKE": OpenBLAS 0.3.21 does not accept that name here.)
  if (__builtin_cpu_supports("avx512f")) return "SKYLAKEX";
  if (__builtin_cpu_supports("avx2")) return "HASWELL";
#endif
  return nullptr;
}

bool cpu_has_bf16_instructions() {
  if (const char* forced = std::getenv("KILN_CPU_BF16")) return std::string(forced) != "0";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream flags(line);
    for (std::string f; flags >> f;)
      if (f == "avx512_bf16" || f == "amx_bf16") return true;
    return false;
  }
  return false;
}

void apply_runtime_defaults(char** argv) {
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    setenv("GOMP_SPINCOUNT", "2000", 1);  // overrides PASSIVE's zero spins
    changed = true;
  }
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    if (const char* core = openblas_core_override()) {
      setenv("OPENBLAS_CORETYPE", core, 1);
      changed = true;
    }
  }
  if (changed) execv("/proc/self/exe", argv);
  // Nothing to change, or exec failed (no /proc): carry on with the libraries' defaults.
}

}  // namespace kiln
