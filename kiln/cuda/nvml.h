// Power, clocks and temperatures of a GPU through NVML, the driver's
// management library, loaded at run time: a build needs no NVML headers, and
// a machine without the driver reports why instead of failing to start.
#pragma once
#include <string>

#include "kiln/backend/gpu_info.h"

namespace kiln::cuda {

// Fills gpu's NVML fields for the device at this PCI bus id (as
// cudaDeviceGetPCIBusId gives it), or sets gpu.nvml_error.
void read_nvml(const std::string& pci_bus_id, GpuInfo& gpu);

}  // namespace kiln::cuda
