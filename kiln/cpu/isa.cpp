#include "kiln/cpu/isa.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "kiln/core/error.h"
#ifdef KILN_HAVE_DNNL
#include <dnnl.h>
#endif

namespace kiln::cpu {

namespace {

// One row per level: its name, the CPU flags (as /proc/cpuinfo spells
// them) it adds to the level below, and the names oneDNN and OpenBLAS give
// the same cap. (OpenBLAS 0.3.21 has no kernels past SkylakeX's for f64.)
struct IsaLevel {
  Isa isa;
  const char* name;
  std::vector<std::string> flags;
  const char* onednn;
  const char* openblas;
};

const std::vector<IsaLevel>& isa_levels() {
  static const std::vector<IsaLevel> levels = {
      {Isa::avx2, "avx2", {"avx2", "fma"}, "AVX2", "HASWELL"},
      {Isa::avx512, "avx512", {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}, "AVX512_CORE", "SKYLAKEX"},
      {Isa::avx512_bf16, "avx512_bf16", {"avx512_bf16"}, "AVX512_CORE_BF16", "SKYLAKEX"},
      {Isa::amx, "amx", {"amx_tile", "amx_bf16"}, "AVX512_CORE_AMX", "SKYLAKEX"},
  };
  return levels;
}

std::vector<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::vector<std::string> flags;
    for (std::string f; words >> f;) flags.push_back(f);
    return flags;
  }
  return {};
}

bool has_flag(const std::vector<std::string>& flags, const std::string& f) {
  for (const std::string& g : flags)
    if (g == f) return true;
  return false;
}

// Without /proc/cpuinfo (some sandboxes), the compiler's own CPUID reading
// for the levels it knows.
bool builtin_has(const std::string& flag) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (flag == "avx2") return __builtin_cpu_supports("avx2");
  if (flag == "fma") return __builtin_cpu_supports("fma");
  if (flag == "avx512f") return __builtin_cpu_supports("avx512f");
  if (flag == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (flag == "avx512vl") return __builtin_cpu_supports("avx512vl");
  if (flag == "avx512dq") return __builtin_cpu_supports("avx512dq");
  if (flag == "avx512cd") return __builtin_cpu_supports("avx512cd");
  if (flag == "avx512_bf16") return __builtin_cpu_supports("avx512bf16");
#endif
  return false;
}

const IsaLevel& level_of(Isa isa) { return isa_levels().at(size_t(isa)); }

}  // namespace

bool cpu_is_amd() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}

Isa detected_isa() {
  static const Isa detected = [] {
    const std::vector<std::string> flags = cpu_flags();
    Isa best = Isa::avx2;  // the build's baseline: the program would not have started below it
    for (const IsaLevel& level : isa_levels()) {
      if (level.isa == Isa::avx2) continue;
      for (const std::string& f : level.flags)
        if (flags.empty() ? !builtin_has(f) : !has_flag(flags, f)) return best;
      best = level.isa;
    }
    return best;
  }();
  return detected;
}

std::string isa_cap_setting() {
  const char* cap = std::getenv("KILN_MAX_ISA");
  return cap ? cap : "";
}

Isa max_isa() {
  static const Isa isa = [] {
    const std::string cap = isa_cap_setting();
    if (cap.empty()) return detected_isa();
    std::string names;
    for (const IsaLevel& level : isa_levels()) {
      if (cap == level.name) {
        KILN_CHECK(int(level.isa) <= int(detected_isa()), "KILN_MAX_ISA=", cap, " is above what this CPU has (",
                   isa_name(detected_isa()), "); unset it or choose a lower level");
        return level.isa;
      }
      names += std::string(names.empty() ? "" : ", ") + level.name;
    }
    KILN_FAIL("KILN_MAX_ISA=", cap, " names no instruction set Kiln knows; choose one of ", names);
  }();
  return isa;
}

const char* isa_name(Isa isa) { return level_of(isa).name; }
const char* onednn_isa_name(Isa isa) { return level_of(isa).onednn; }
const char* openblas_core_name(Isa isa) { return level_of(isa).openblas; }

std::string onednn_dispatch_isa() {
#ifdef KILN_HAVE_DNNL
  static const std::pair<dnnl_cpu_isa_t, const char*> names[] = {
      {dnnl_cpu_isa_sse41, "SSE41"},
      {dnnl_cpu_isa_avx, "AVX"},
      {dnnl_cpu_isa_avx2, "AVX2"},
      {dnnl_cpu_isa_avx2_vnni, "AVX2_VNNI"},
      {dnnl_cpu_isa_avx512_core, "AVX512_CORE"},
      {dnnl_cpu_isa_avx512_core_vnni, "AVX512_CORE_VNNI"},
      {dnnl_cpu_isa_avx512_core_bf16, "AVX512_CORE_BF16"},
      {dnnl_cpu_isa_avx512_core_amx, "AVX512_CORE_AMX"},
  };
  const dnnl_cpu_isa_t effective = dnnl_get_effective_cpu_isa();
  for (const auto& [isa, name] : names)
    if (isa == effective) return name;
  return "ISA #" + std::to_string(int(effective));
#else
  return "none (this build has no oneDNN)";
#endif
}

}  // namespace kiln::cpu
