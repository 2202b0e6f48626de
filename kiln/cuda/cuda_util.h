// Host-side helpers shared by every file of the CUDA backend: error checks,
// the per-device state (one compute stream, cuBLAS handles, workspace), the
// device guard, temporaries from the caching allocator, and argument checks.
//
// Everything an op launches goes on stream_for(device): Kiln keeps one
// compute stream per device, so stream order alone makes it safe to hand a
// freed block to the next allocation on that device.
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <functional>
#include <string>

#include "kiln/backend/backend.h"
#include "kiln/cuda/cublas_api.h"

namespace kiln::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* expr, const char* file, int line);

#define KILN_CUDA_CHECK(expr)                                                                       \
  do {                                                                                              \
    cudaError_t kiln_e_ = (expr);                                                                   \
    if (kiln_e_ != cudaSuccess) ::kiln::cuda::throw_cuda_error(kiln_e_, #expr, __FILE__, __LINE__); \
  } while (0)

#define KILN_CUBLAS_CHECK(expr)                                                             \
  do {                                                                                      \
    int kiln_s_ = int(expr);                                                                \
    if (kiln_s_ != 0) ::kiln::cuda::throw_cublas_error(kiln_s_, #expr, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch: a bad configuration (grid, shared memory) shows
// up here instead of as a wrong answer later.
#define KILN_CUDA_CHECK_LAUNCH() KILN_CUDA_CHECK(cudaGetLastError())

// The ops whose kernels check their input on the device (see
// input_check_slot below), one slot each.
enum class InputCheck { embedding, embedding_backward, cross_entropy, paged_attention, scatter_rows };
constexpr size_t kInputChecks = size_t(InputCheck::scatter_rows) + 1;

// Lazily created resources of one device.
struct DeviceState {
  int index = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;  // for f64 (cublasDgemm); cuBLASLt has no f64 GEMM
  void* lt_workspace = nullptr;
  size_t lt_workspace_bytes = 0;
  int sm_count = 0;
  int max_smem_optin = 0;          // bytes of dynamic shared memory a block may opt into
  int* input_errors = nullptr;       // device ints, one per InputCheck: the first bad index + 1
  int* input_errors_host = nullptr;  // pinned mirror they are read back into at a synchronisation
  bool input_checks_armed = false;   // a checking kernel ran since the last read
  std::array<std::function<std::string(int64_t)>, kInputChecks> input_error_text;  // each check's last message
};

DeviceState& device_state(int device);
inline cudaStream_t stream_for(int device) { return device_state(device).stream; }

// Makes `device` current for the scope (and restores the previous one).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Kernels that find bad input (an id, target, page or row out of range) skip
// it and record the first bad index + 1 in their check's slot instead of
// reading or writing out of bounds, and nothing waits for them: the slots are
// read back with the device's next synchronisation (a copy to the host,
// synchronize()), which throws the recorded error once. So a training step or
// a decode step syncs once, where it reads its result, not once per op.
// The slot for one launch of `check`'s kernel; `message` words its error
// from the recorded index.
int* input_check_slot(int device, InputCheck check, std::function<std::string(int64_t)> message);
// Waits for the device's stream, then throws the first recorded input error.
void synchronize_stream(int device);

// ---- temporaries (booked under MemoryCategory::workspace)
Tensor empty_workspace(const Shape& shape, DType dtype, Device device);
// `t` itself when already contiguous, otherwise a contiguous copy on t's device.
Tensor contiguous_or_copy(const Tensor& t);
// Strided copy with dtype cast between two tensors on the same device (copy.cu).
void copy_on_device(const Tensor& src, Tensor& dst);
// out [..., M, N] (any strides) = gelu?(out + bias[N]); when pre_gelu is
// defined it receives the value before GELU (matmul_epilogue.cu). Used where
// cuBLASLt has no fused epilogue for the case (f64, odd leading dims).
void matmul_bias_gelu(Tensor& out, const Tensor& bias, bool gelu, Tensor& pre_gelu);

// Copies `bytes` of host memory to `device_ptr` asynchronously on the
// device's stream, through a pinned staging buffer; `host` may be reused as
// soon as this returns.
void upload_async(const void* host, void* device_ptr, size_t bytes, int device);

// ---- launch geometry
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Whether t's first element starts on a multiple of `bytes` (vector loads and stores).
inline bool aligned_to(const Tensor& t, size_t bytes) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0; }
// Blocks for a grid-stride loop over n items: enough to fill the GPU, no more.
int grid_for(int64_t n, int block, int device);

// ---- argument checks (messages name the op and the argument)
void check_cuda(const Tensor& t, const char* op, const char* what);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_contiguous(const Tensor& t, const char* op, const char* what);
void check_dtype(const Tensor& t, DType expected, const char* op, const char* what);
void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* what);
// Floating dtypes the CUDA kernels compute in: f32, f64, bf16, f16.
void check_floating(const Tensor& t, const char* op, const char* what);

// Tensor memory is addressed through data_ptr() as a typed device pointer.
template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

}  // namespace kiln::cuda
