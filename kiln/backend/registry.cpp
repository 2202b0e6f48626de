// Finds the backend for a device. The CPU and CUDA layers provide the two
// factory hooks below; a build without the CUDA toolkit links kiln/cuda_stub,
// whose hook reports why CUDA is unavailable.
#include "kiln/backend/backend.h"
#include "kiln/backend/profiler.h"

namespace kiln {

Backend* cpu_backend_instance();                    // kiln/cpu/cpu_backend.cpp
Backend* cuda_backend_instance(std::string* why_not);  // kiln/cuda or kiln/cuda_stub
Backend* meta_backend_instance();                    // kiln/meta/meta_backend.cpp

namespace {
// Lets the CUDA backend register its allocator on a program's first CUDA
// allocation (registry.cpp is linked into every program that uses tensors).
[[maybe_unused]] const bool g_cuda_allocator_hook = [] {
  register_allocator_initializer(DeviceType::cuda, [] {
    std::string why;
    cuda_backend_instance(&why);
  });
  register_allocator_initializer(DeviceType::meta, [] { meta_backend_instance(); });
  return true;
}();
}  // namespace

namespace {
Backend& find_backend(Device device) {
  if (device.is_cpu()) return *cpu_backend_instance();
  if (device.type == DeviceType::meta) return *meta_backend_instance();
  std::string why;
  Backend* cuda = cuda_backend_instance(&why);
  KILN_CHECK(cuda, "device ", device.str(), " is not available: ", why, ". Run with --device cpu.");
  KILN_CHECK(device.index < cuda->device_count(), "device ", device.str(), " does not exist: this machine has ",
             cuda->device_count(), " CUDA device(s)");
  return *cuda;
}
}  // namespace

Backend& backend_for(Device device) {
  Backend& b = find_backend(device);
  return Profiler::enabled() ? profiling_backend(b) : b;
}

Backend& backend_for(const Tensor& t) { return backend_for(t.device()); }

bool cuda_is_available() {
  std::string why;
  return cuda_backend_instance(&why) != nullptr;
}

std::string cuda_unavailable_reason() {
  std::string why;
  return cuda_backend_instance(&why) ? std::string() : why;
}

}  // namespace kiln
