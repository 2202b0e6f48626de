#include "kiln/cpu/runtime_defaults.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/core/error.h"
#include "kiln/cpu/isa.h"

namespace kiln {

const char* openblas_core_override() {
  const char* detected = openblas_get_corename();
  const std::string core = detected ? detected : "";
  // OpenBLAS's generic fallbacks for an x86-64 CPU it cannot place.
  if (core != "Prescott" && core != "Core2" && core != "Nehalem" && core != "Penryn" && core != "Dunnington")
    return nullptr;
  return cpu::openblas_core_name(cpu::max_isa());
}

bool cpu_has_bf16_instructions() {
  if (const char* forced = std::getenv("KILN_CPU_BF16")) return std::string(forced) != "0";
  return cpu::isa_allows(cpu::Isa::avx512_bf16);
}

namespace {

// KILN_MAX_ISA reaches the libraries too: oneDNN reads ONEDNN_MAX_CPU_ISA
// when it first dispatches, and OpenBLAS its core type when it is loaded
// (so this needs the re-execution). A user's own values win. Returns
// whether the environment changed.
bool apply_isa_cap() {
  cpu::Isa cap;
  try {
    cap = cpu::max_isa();
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::exit(2);
  }
  if (cap == cpu::detected_isa()) return false;
  setenv("ONEDNN_MAX_CPU_ISA", cpu::onednn_isa_name(cap), 0);
  if (std::getenv("OPENBLAS_CORETYPE")) return false;
  setenv("OPENBLAS_CORETYPE", cpu::openblas_core_name(cap), 1);
  return true;
}

}  // namespace

void apply_runtime_defaults(char** argv) {
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    setenv("GOMP_SPINCOUNT", "2000", 1);  // overrides PASSIVE's zero spins
    changed = true;
  }
  changed |= apply_isa_cap();
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
