// What `kiln info` shows per GPU: properties from the runtime, derived peak
// numbers, and (on request) a measured device-to-device copy bandwidth.
// Returns {} when there is no usable GPU or driver; never throws for that.
#include "kiln/backend/gpu_info.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kiln/cuda/attention_cudnn.h"
#include "kiln/cuda/nvml.h"

namespace kiln {
namespace {

// FP32 lanes per SM by architecture (CUDA C Programming Guide, "Arithmetic
// Instructions" throughput table).
int fp32_lanes_per_sm(int major, int minor) {
  switch (major) {
    case 3:
      return 192;  // Kepler
    case 5:
      return 128;  // Maxwell
    case 6:
      return minor == 0 ? 64 : 128;  // P100 : other Pascal
    case 7:
      return 64;  // Volta, Turing
    case 8:
      return minor == 0 ? 64 : 128;  // A100 : GA10x, Ada (8.9)
    case 9:
      return 128;  // Hopper
    case 10:
    case 11:
    case 12:
      return 128;  // Blackwell
    default:
      return 128;
  }
}

std::string tensor_core_generation(int major, int minor) {
  if (major < 7) return "none";
  if (major == 7) return minor == 0 ? "1st gen (Volta)" : "2nd gen (Turing)";
  if (major == 8) return minor == 9 ? "4th gen (Ada)" : "3rd gen (Ampere)";
  if (major == 9) return "4th gen (Hopper)";
  if (major == 10 || major == 11 || major == 12) return "5th gen (Blackwell)";
  return "unknown (compute capability " + std::to_string(major) + "." + std::to_string(minor) + ")";
}

// GB/s of a device-to-device cudaMemcpy, counting bytes read plus written
// (the usual "copy bandwidth"); 0 if anything fails.
double measure_copy_bandwidth(int device, size_t total_memory) {
  if (cudaSetDevice(device) != cudaSuccess) return 0;
  const size_t bytes = std::min<size_t>(size_t(256) << 20, total_memory / 8);
  void *a = nullptr, *b = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  double gbs = 0;
  if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess &&
      cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess) {
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
    const int reps = 10;
    cudaEventRecord(start);
    for (int i = 0; i < reps; ++i) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    float ms = 0;
    if (cudaEventSynchronize(stop) == cudaSuccess && cudaEventElapsedTime(&ms, start, stop) == cudaSuccess && ms > 0)
      gbs = 2.0 * double(bytes) * reps / (double(ms) * 1e-3) / 1e9;
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (a) cudaFree(a);
  if (b) cudaFree(b);
  cudaGetLastError();
  return gbs;
}

}  // namespace

std::vector<GpuInfo> query_gpus(bool measure_bandwidth) {
  std::vector<GpuInfo> gpus;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return gpus;
  }
  int previous = 0;
  cudaGetDevice(&previous);
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.sm_count = p.multiProcessorCount;
    g.cuda_cores = p.multiProcessorCount * fp32_lanes_per_sm(p.major, p.minor);
    g.memory_bytes = p.totalGlobalMem;
    int clock_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i);
    // Double data rate: two transfers per clock of a bus `bus_bits` wide.
    g.theoretical_bandwidth_gbs = 2.0 * double(clock_khz) * 1e3 * (bus_bits / 8.0) / 1e9;
    g.tensor_core_generation = tensor_core_generation(p.major, p.minor);
    g.attention_kernels = cuda::cudnn_attention_status();
    if (measure_bandwidth) g.measured_bandwidth_gbs = measure_copy_bandwidth(i, p.totalGlobalMem);
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, i) == cudaSuccess)
      cuda::read_nvml(bus_id, g);
    else
      g.nvml_error = "the runtime gave no PCI bus id to find the GPU in NVML";
    gpus.push_back(g);
  }
  cudaSetDevice(previous);
  cudaGetLastError();
  return gpus;
}

}  // namespace kiln
