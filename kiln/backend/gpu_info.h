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
};

// Lists the GPUs; measures bandwidth only when asked (it takes a moment).
std::vector<GpuInfo> query_gpus(bool measure_bandwidth);

}  // namespace kiln
