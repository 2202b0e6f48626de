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

#include "kiln/cuda/attention_cudnn.h"
namespace kiln::cuda {
bool cudnn_attention(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, float, bool) { return false; }
bool cudnn_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              Tensor&, Tensor&, Tensor&, float, bool) {
  return false;
}
std::string cudnn_attention_status() { return "no CUDA backend in this build"; }
void set_cudnn_attention_enabled(bool) {}
}  // namespace kiln::cuda
