// Dropout mask: mask[i] = u_i >= p ? 1/(1-p) : 0 with u_i = philox_uniform(seed,
// offset, i) from kiln/core/philox.h, the very function the CPU uses, so both
// backends draw the same mask bit for bit.
//
// One Philox4x32-10 call yields the uniforms of four consecutive stream
// positions (counter = position / 4), so a thread handles one counter and
// writes up to four elements; the ends are partial when offset or n is not a
// multiple of 4. mask is any float dtype, written in row-major order.
#include "kiln/core/philox.h"
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void dropout_mask_kernel(T* mask, int64_t n, float p, Acc<T> scale, uint64_t seed, uint64_t offset) {
  const uint64_t first = offset >> 2, last = (offset + uint64_t(n) - 1) >> 2;
  const uint64_t counters = last - first + 1;
  for (uint64_t k = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; k < counters;
       k += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t c = first + k;
    const PhiloxOutput r = philox4x32_10(seed, c);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint64_t pos = c * 4 + j;
      if (pos < offset || pos >= offset + uint64_t(n)) continue;
      const float u = float(r.v[j] >> 8) * (1.0f / 16777216.0f);
      mask[pos - offset] = from_acc<T>(u >= p ? scale : Acc<T>(0));
    }
  }
}

}  // namespace

void CudaBackend::dropout_mask(Tensor& mask, float p, uint64_t seed, uint64_t offset) {
  check_cuda(mask, "dropout_mask", "mask");
  check_floating(mask, "dropout_mask", "mask");
  KILN_CHECK(p >= 0.0f && p <= 1.0f, "dropout_mask: p must be in [0, 1], got ", p);
  const int64_t n = mask.numel();
  if (n == 0) return;
  if (!mask.is_contiguous()) {
    Tensor tmp = empty_workspace(mask.shape(), mask.dtype(), mask.device());
    dropout_mask(tmp, p, seed, offset);
    copy_on_device(tmp, mask);
    return;
  }
  const int dev = mask.device().index;
  DeviceGuard guard(dev);
  const int64_t counters = int64_t(((offset + uint64_t(n) - 1) >> 2) - (offset >> 2) + 1);
  dispatch_floating(mask.dtype(), "dropout_mask", [&]<typename T>() {
    // 1/(1-p) as the CPU computes it in its compute type (p = 1 gives inf, but no u reaches 1).
    const Acc<T> scale = Acc<T>(1) / (Acc<T>(1) - Acc<T>(p));
    dropout_mask_kernel<T>
        <<<grid_for(counters, 256, dev), 256, 0, stream_for(dev)>>>(ptr<T>(mask), n, p, scale, seed, offset);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
