// NVML through dlopen. The few entry points used are declared here by their
// documented C signatures (nvml.h is not in every CUDA install), and the
// enum values are NVML's own: NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2,
// NVML_TEMPERATURE_GPU = 0, NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0 and
// _SLOWDOWN = 1, and the nvmlClocksThrottleReason bits below.
#include "kiln/cuda/nvml.h"

#include <dlfcn.h>

#include <utility>

namespace kiln::cuda {
namespace {

using Ret = int;  // nvmlReturn_t; 0 is NVML_SUCCESS
using Handle = struct NvmlDevice*;

struct Nvml {
  Ret (*init)();
  const char* (*error_string)(Ret);
  Ret (*handle_by_pci_bus_id)(const char*, Handle*);
  Ret (*power_usage)(Handle, unsigned*);           // milliwatts
  Ret (*enforced_power_limit)(Handle, unsigned*);  // milliwatts
  Ret (*clock)(Handle, int, unsigned*);            // MHz
  Ret (*max_clock)(Handle, int, unsigned*);
  Ret (*temperature)(Handle, int, unsigned*);  // degrees C
  Ret (*temperature_threshold)(Handle, int, unsigned*);
  Ret (*throttle_reasons)(Handle, unsigned long long*);
  std::string error;  // why NVML cannot be used, if it cannot
};

constexpr int kClockSm = 1, kClockMemory = 2, kTemperatureGpu = 0;
constexpr int kThresholdShutdown = 0, kThresholdSlowdown = 1;

const std::pair<unsigned long long, const char*> kClockLimits[] = {
    {0x1, "idle"},
    {0x2, "application clock setting"},
    {0x4, "power cap"},
    {0x8, "hardware slowdown"},
    {0x10, "sync boost"},
    {0x20, "software thermal slowdown"},
    {0x40, "hardware thermal slowdown"},
    {0x80, "power brake"},
    {0x100, "display clock setting"},
};

template <typename F>
bool bind(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  return f != nullptr;
}

Nvml load() {
  Nvml n{};
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    n.error = "libnvidia-ml.so.1 (NVML, part of the NVIDIA driver) could not be loaded";
    return n;
  }
  const bool bound = bind(lib, "nvmlInit_v2", n.init) && bind(lib, "nvmlErrorString", n.error_string) &&
                     bind(lib, "nvmlDeviceGetHandleByPciBusId_v2", n.handle_by_pci_bus_id) &&
                     bind(lib, "nvmlDeviceGetPowerUsage", n.power_usage) &&
                     bind(lib, "nvmlDeviceGetEnforcedPowerLimit", n.enforced_power_limit) &&
                     bind(lib, "nvmlDeviceGetClockInfo", n.clock) &&
                     bind(lib, "nvmlDeviceGetMaxClockInfo", n.max_clock) &&
                     bind(lib, "nvmlDeviceGetTemperature", n.temperature) &&
                     bind(lib, "nvmlDeviceGetTemperatureThreshold", n.temperature_threshold) &&
                     bind(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", n.throttle_reasons);
  if (!bound) {
    n.error = "libnvidia-ml.so.1 lacks an NVML function Kiln reads (a driver older than R450?)";
    return n;
  }
  if (Ret r = n.init(); r != 0) n.error = std::string("nvmlInit failed: ") + n.error_string(r);
  return n;
}

const Nvml& nvml() {
  static const Nvml n = load();  // initialised once; NVML stays loaded for the process
  return n;
}

}  // namespace

void read_nvml(const std::string& pci_bus_id, GpuInfo& gpu) {
  const Nvml& n = nvml();
  if (!n.error.empty()) {
    gpu.nvml_error = n.error;
    return;
  }
  Handle h = nullptr;
  if (Ret r = n.handle_by_pci_bus_id(pci_bus_id.c_str(), &h); r != 0) {
    gpu.nvml_error = "NVML does not know the GPU at " + pci_bus_id + ": " + n.error_string(r);
    return;
  }
  // A reading the GPU does not support leaves its field at 0.
  unsigned v = 0;
  if (n.power_usage(h, &v) == 0) gpu.power_draw_w = v / 1000.0;
  if (n.enforced_power_limit(h, &v) == 0) gpu.power_limit_w = v / 1000.0;
  if (n.clock(h, kClockSm, &v) == 0) gpu.sm_clock_mhz = int(v);
  if (n.max_clock(h, kClockSm, &v) == 0) gpu.sm_clock_max_mhz = int(v);
  if (n.clock(h, kClockMemory, &v) == 0) gpu.memory_clock_mhz = int(v);
  if (n.max_clock(h, kClockMemory, &v) == 0) gpu.memory_clock_max_mhz = int(v);
  if (n.temperature(h, kTemperatureGpu, &v) == 0) gpu.temperature_c = int(v);
  if (n.temperature_threshold(h, kThresholdSlowdown, &v) == 0) gpu.slowdown_temperature_c = int(v);
  if (n.temperature_threshold(h, kThresholdShutdown, &v) == 0) gpu.shutdown_temperature_c = int(v);
  unsigned long long reasons = 0;
  if (n.throttle_reasons(h, &reasons) == 0)
    for (const auto& [bit, name] : kClockLimits)
      if (reasons & bit) gpu.clock_limits.push_back(name);
}

}  // namespace kiln::cuda
