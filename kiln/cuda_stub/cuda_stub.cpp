// Linked instead of kiln/cuda when the build has no CUDA toolkit.
#include <string>

namespace kiln {
class Backend;
Backend* cuda_backend_instance(std::string* why_not) {
  if (why_not) *why_not = "this build of Kiln was compiled without the CUDA toolkit";
  return nullptr;
}
}  // namespace kiln

#include "kiln/backend/gpu_info.h"
namespace kiln {
std::vector<GpuInfo> query_gpus(bool) { return {}; }
}  // namespace kiln
