// `kiln info`: what this machine offers Kiln — CPU, cores, SIMD, BLAS, GPUs.
#include "apps/cli/info.h"

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "kiln/backend/backend.h"
#include "kiln/backend/gpu_info.h"
#include "kiln/cpu/gemm.h"
#include "kiln/cpu/isa.h"
#include "kiln/cpu/quantized_matmul.h"

extern "C" char* openblas_get_config(void);

namespace kiln::cli {

namespace {

std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      auto colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(colon + 2);
    }
  return "";
}

}  // namespace

int run_info() {
  std::string model = cpuinfo_field("model name");
  std::set<std::string> flags;
  std::istringstream fs(cpuinfo_field("flags"));
  for (std::string f; fs >> f;) flags.insert(f);
  std::string simd;
  for (const char* f : {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                        "amx_tile", "amx_bf16", "amx_int8"})
    if (flags.count(f)) simd += std::string(simd.empty() ? "" : " ") + f;
  std::printf("Kiln %s\n", KILN_VERSION);
  std::printf("CPU:     %s\n", model.empty() ? "unknown" : model.c_str());
  std::printf("cores:   %u logical cores available; Kiln uses %d threads\n", std::thread::hardware_concurrency(),
              get_num_threads());
  std::printf("SIMD:    %s\n", simd.empty() ? "none detected" : simd.c_str());
  std::printf("AMX:     %s\n", flags.count("amx_tile") ? "yes" : "no");
  const std::string cap = cpu::isa_cap_setting();
  std::printf("ISA:     Kiln dispatches up to %s (this CPU: %s; %s), oneDNN up to %s\n", cpu::isa_name(cpu::max_isa()),
              cpu::isa_name(cpu::detected_isa()),
              cap.empty() ? "KILN_MAX_ISA unset" : ("capped by KILN_MAX_ISA=" + cap).c_str(),
              cpu::onednn_dispatch_isa().c_str());
  std::printf("BLAS:    %s\n", openblas_get_config());
  std::printf("f32:     matrix products through %s%s\n", cpu::f32_gemm_library(),
              std::string(cpu::f32_gemm_library()) == "oneDNN" ? ", convolutions direct through oneDNN" : "");
  std::printf("bf16:    %s\n", cpu::bf16_gemm_available()
                                  ? "matrix products through oneDNN's bf16 kernels (faster than f32 on this CPU)"
                                  : "matrix products in f32 on the rounded operands (no faster bf16 kernel here)");
  std::printf("int8/4:  quantized weights (--quantize, GGUF) multiply as %s integer dot products; from %lld rows "
              "(a prompt) as an integer GEMM\n",
              cpu::quant_dot_name(cpu::quant_dot_in_use()), static_cast<long long>(cpu::gemm_rows(cpu::quant_dot_in_use())));
  std::vector<GpuInfo> gpus = query_gpus(/*measure_bandwidth=*/true);
  if (gpus.empty()) {
    std::printf("GPUs:    none (%s)\n", cuda_unavailable_reason().c_str());
    return 0;
  }
  for (const GpuInfo& g : gpus) {
    std::printf("GPU %d:   %s, compute capability %d.%d\n", g.index, g.name.c_str(), g.cc_major, g.cc_minor);
    std::printf("         %d SMs, %d CUDA cores, %.1f GiB memory\n", g.sm_count, g.cuda_cores,
                double(g.memory_bytes) / double(1ull << 30));
    std::printf("         memory bandwidth: %.0f GB/s theoretical, %.0f GB/s measured (device-to-device copy)\n",
                g.theoretical_bandwidth_gbs, g.measured_bandwidth_gbs);
    std::printf("         tensor cores: %s\n", g.tensor_core_generation.c_str());
    std::printf("         attention: %s\n", g.attention_kernels.c_str());
    if (!g.nvml_error.empty()) {
      std::printf("         power, clocks, temperature: unknown (%s)\n", g.nvml_error.c_str());
      continue;
    }
    std::string limits;
    for (const std::string& l : g.clock_limits) limits += (limits.empty() ? "" : ", ") + l;
    std::printf("         power: %.0f W drawn of a %.0f W limit\n", g.power_draw_w, g.power_limit_w);
    std::printf("         clocks: SM %d of %d MHz, memory %d of %d MHz%s%s\n", g.sm_clock_mhz, g.sm_clock_max_mhz,
                g.memory_clock_mhz, g.memory_clock_max_mhz, limits.empty() ? "" : "; held back by: ", limits.c_str());
    std::printf("         temperature: %d C; clocks slow down at %d C, shutdown at %d C\n", g.temperature_c,
                g.slowdown_temperature_c, g.shutdown_temperature_c);
  }
  return 0;
}

}  // namespace kiln::cli
