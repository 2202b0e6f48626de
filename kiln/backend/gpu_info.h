// What `kiln info` reports about each GPU. Implemented by kiln/cuda (querying
// the driver and measuring bandwidth) or kiln/cuda_stub (no GPUs).
#pragma once
#include <string>
#include <vector>

namespace kiln {

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int cuda_cores = 0;  // SMs x FP32 lanes per SM for the architecture
  size_t memory_bytes = 0;
  double theoretical_bandwidth_gbs = 0;  // from memory clock and bus width
  double measured_bandwidth_gbs = 0;     // device-to-device copy, 0 if not measured
  std::string tensor_core_generation;    // e.g. "4th gen (Hopper)"
  std::string attention_kernels;         // whether cuDNN's fused attention runs, or why not

  // Through NVML (libnvidia-ml, which ships with the driver); when it cannot
  // be read, nvml_error says why and the numbers below stay 0.
  std::string nvml_error;
  double power_draw_w = 0, power_limit_w = 0;
  int sm_clock_mhz = 0, sm_clock_max_mhz = 0, memory_clock_mhz = 0, memory_clock_max_mhz = 0;
  int temperature_c = 0;
  int slowdown_temperature_c = 0;  // the GPU lowers its clocks from here
  int shutdown_temperature_c = 0;  // and switches itself off here
  std::vector<std::string> clock_limits;  // why the clocks are below their maximum now ("idle", "power cap", ...)
};

// Lists the GPUs; measures bandwidth only when asked (it takes a moment).
std::vector<GpuInfo> query_gpus(bool measure_bandwidth);

}  // namespace kiln
