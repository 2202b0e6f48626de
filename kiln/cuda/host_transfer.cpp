// Device-to-host copies that overlap compute (ZeRO-Offload's gradient
// stream). Each copy waits for the compute stream's work so far through an
// event, then runs on a per-device transfer stream, so backward goes on
// while earlier gradients travel. The source block is kept alive until its
// copy's event completes: the caching allocator may hand a freed block to
// the next op on the compute stream, which must not overwrite it mid-copy.
#include <mutex>
#include <vector>

#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"

namespace kiln::cuda {
namespace {

struct InFlight {
  cudaEvent_t done = nullptr;
  Tensor source;  // keeps the device block alive until `done`
};

struct TransferState {
  std::mutex mutex;
  cudaStream_t stream = nullptr;
  std::vector<InFlight> in_flight;
};

TransferState g_transfers[64];

TransferState& transfers_for(int device) {
  TransferState& t = g_transfers[device];
  if (!t.stream) KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&t.stream, cudaStreamNonBlocking));
  return t;
}

// Drops the copies that have landed (their source blocks go back to the pool).
void reap_finished(TransferState& t) {
  std::erase_if(t.in_flight, [](InFlight& f) {
    const cudaError_t e = cudaEventQuery(f.done);
    if (e == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: clear it
      return false;
    }
    KILN_CUDA_CHECK(e);
    KILN_CUDA_CHECK(cudaEventDestroy(f.done));
    return true;
  });
}

}  // namespace

void CudaBackend::copy_to_host_async(const Tensor& src, Tensor& dst) {
  check_cuda(src, "copy_to_host_async", "src");
  KILN_CHECK(dst.device().is_cpu() && src.shape() == dst.shape(), "copy_to_host_async: dst must be a host tensor of "
             "the source's shape ", shape_str(src.shape()));
  if (!dst.is_contiguous() || dst.numel() == 0) return copy(src, dst);
  const int dev = src.device().index;
  DeviceGuard guard(dev);
  Tensor packed = src;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {  // cast/pack on the device first, in compute order
    packed = empty_workspace(src.shape(), dst.dtype(), src.device());
    copy_on_device(src, packed);
  }
  TransferState& t = transfers_for(dev);
  std::lock_guard<std::mutex> lock(t.mutex);
  reap_finished(t);
  cudaEvent_t produced = nullptr, landed = nullptr;
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
  KILN_CUDA_CHECK(cudaEventRecord(produced, stream_for(dev)));
  KILN_CUDA_CHECK(cudaStreamWaitEvent(t.stream, produced, 0));
  KILN_CUDA_CHECK(cudaEventDestroy(produced));  // released once the wait is satisfied
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), packed.data_ptr(), packed.nbytes(), cudaMemcpyDeviceToHost, t.stream));
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&landed, cudaEventDisableTiming));
  KILN_CUDA_CHECK(cudaEventRecord(landed, t.stream));
  t.in_flight.push_back({landed, packed});
}

void CudaBackend::finish_host_copies(int device_index) {
  TransferState& t = transfers_for(device_index);
  std::lock_guard<std::mutex> lock(t.mutex);
  for (InFlight& f : t.in_flight) {
    KILN_CUDA_CHECK(cudaEventSynchronize(f.done));
    KILN_CUDA_CHECK(cudaEventDestroy(f.done));
  }
  t.in_flight.clear();
}

void CudaBackend::pin_host_memory(const Tensor& host) {
  KILN_CHECK(host.device().is_cpu() && host.is_contiguous(), "pin_host_memory: needs a contiguous host tensor");
  if (host.nbytes() == 0) return;
  const cudaError_t e = cudaHostRegister(host.data_ptr(), host.nbytes(), cudaHostRegisterDefault);
  if (e == cudaErrorHostMemoryAlreadyRegistered) {
    cudaGetLastError();
    return;
  }
  KILN_CUDA_CHECK(e);
}

void CudaBackend::unpin_host_memory(const Tensor& host) {
  if (host.nbytes() == 0) return;
  const cudaError_t e = cudaHostUnregister(host.data_ptr());
  if (e == cudaErrorHostMemoryNotRegistered) {
    cudaGetLastError();
    return;
  }
  KILN_CUDA_CHECK(e);
}

}  // namespace kiln::cuda
