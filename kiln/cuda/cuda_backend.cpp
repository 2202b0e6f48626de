// Backend creation, per-device state (stream, cuBLAS handles, workspace,
// input-check slots) and the small host helpers every op file uses.
//
// cuda_backend_instance() runs on every start of Kiln, CPU runs included, so
// it must survive a machine with no GPU or no driver: cudaGetDeviceCount then
// returns an error (the runtime loads libcuda lazily) and we report it.
// Backend, device states and allocators are never destroyed: tensors held in
// static objects may be freed after main returns.
#include "kiln/cuda/cuda_backend.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "kiln/cuda/cuda_util.h"

namespace kiln {

Backend* cuda_backend_instance(std::string* why_not) {
  struct Init {
    Backend* backend = nullptr;
    std::string why;
  };
  static const Init init = [] {
    Init r;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear it so later calls do not see a stale error
      r.why = std::string("no CUDA device found (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
      return r;
    }
    if (n <= 0) {
      r.why = "no CUDA device found (cudaGetDeviceCount returned 0; check CUDA_VISIBLE_DEVICES)";
      return r;
    }
    register_allocator(DeviceType::cuda, &cuda::caching_allocator_for);
    r.backend = new cuda::CudaBackend(n);  // lives for the whole process
    return r;
  }();
  if (!init.backend && why_not) *why_not = init.why;
  return init.backend;
}

}  // namespace kiln

namespace kiln::cuda {

void throw_cuda_error(cudaError_t e, const char* expr, const char* file, int line) {
  KILN_FAIL("CUDA error: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ") in ", expr, " at ", file, ":", line,
            e == cudaErrorMemoryAllocation ? ". The GPU is out of memory: reduce the batch size." : "");
}

void throw_cublas_error(int status, const char* expr, const char* file, int line) {
  KILN_FAIL("cuBLAS error ", cublas().cublasGetStatusString(cublasStatus_t(status)), " (status ", status, ") in ", expr,
            " at ", file, ":", line);
}

namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kCublasLtWorkspace = size_t(32) << 20;  // llm.c uses 32 MiB on Hopper

std::mutex g_state_mutex;
DeviceState* g_states[kMaxDevices] = {};

DeviceState* create_state(int device) {
  DeviceGuard guard(device);
  auto* s = new DeviceState;
  s->index = device;
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&s->sm_count, cudaDevAttrMultiProcessorCount, device));
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&s->max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  KILN_CUBLAS_CHECK(cublas().cublasLtCreate(&s->lt));
  KILN_CUBLAS_CHECK(cublas().cublasCreate(&s->blas));
  KILN_CUBLAS_CHECK(cublas().cublasSetStream(s->blas, s->stream));
  // Through the allocator so `kiln info`/the planner see it.
  s->lt_workspace = caching_allocator_for(device)->allocate(kCublasLtWorkspace, MemoryCategory::workspace);
  s->lt_workspace_bytes = kCublasLtWorkspace;
  const size_t slots = s->input_error_text.size() * sizeof(int);
  KILN_CUDA_CHECK(cudaMalloc(&s->input_errors, slots));
  KILN_CUDA_CHECK(cudaMemset(s->input_errors, 0, slots));
  KILN_CUDA_CHECK(cudaHostAlloc(&s->input_errors_host, slots, cudaHostAllocDefault));
  std::memset(s->input_errors_host, 0, slots);
  return s;
}

}  // namespace

DeviceState& device_state(int device) {
  KILN_CHECK(device >= 0 && device < kMaxDevices, "cuda device index ", device, " is out of range");
  std::lock_guard<std::mutex> lock(g_state_mutex);
  if (!g_states[device]) g_states[device] = create_state(device);
  return *g_states[device];
}

DeviceGuard::DeviceGuard(int device) {
  int current = -1;
  KILN_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    KILN_CUDA_CHECK(cudaSetDevice(device));
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

int* input_check_slot(int device, InputCheck check, std::function<std::string(int64_t)> message) {
  DeviceState& s = device_state(device);
  s.input_error_text[size_t(check)] = std::move(message);
  s.input_checks_armed = true;
  return s.input_errors + int(check);
}

void synchronize_stream(int device) {
  DeviceState& s = device_state(device);
  const bool armed = s.input_checks_armed;
  const size_t slots = s.input_error_text.size() * sizeof(int);
  if (armed)
    KILN_CUDA_CHECK(cudaMemcpyAsync(s.input_errors_host, s.input_errors, slots, cudaMemcpyDeviceToHost, s.stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  if (!armed) return;
  s.input_checks_armed = false;
  for (size_t i = 0; i < s.input_error_text.size(); ++i) {
    const int recorded = s.input_errors_host[i];
    if (recorded == 0) continue;
    std::memset(s.input_errors_host, 0, slots);
    KILN_CUDA_CHECK(cudaMemsetAsync(s.input_errors, 0, slots, s.stream));
    KILN_FAIL(s.input_error_text[i](int64_t(recorded) - 1), " (found at the next synchronisation with cuda:", device,
              ": GPU kernels report bad input there, not at the call)");
  }
}

void CudaBackend::synchronize(int device_index) {
  KILN_CHECK(device_index >= 0 && device_index < device_count_, "synchronize: cuda:", device_index, " does not exist (",
             device_count_, " device(s))");
  DeviceGuard guard(device_index);
  synchronize_stream(device_index);
}

Tensor empty_workspace(const Shape& shape, DType dtype, Device device) {
  MemoryCategoryScope scope(MemoryCategory::workspace);
  return Tensor::empty(shape, dtype, device);
}

int grid_for(int64_t n, int block, int device) {
  int64_t blocks = ceil_div(std::max<int64_t>(n, 1), block);
  int64_t cap = int64_t(device_state(device).sm_count) * 32;  // enough resident blocks to hide latency
  return int(std::max<int64_t>(1, std::min(blocks, cap)));
}

void check_cuda(const Tensor& t, const char* op, const char* what) {
  KILN_CHECK(t.defined(), op, ": ", what, " is undefined");
  KILN_CHECK(t.device().is_cuda(), op, ": ", what, " must be on a cuda device, got ", t.device().str(),
             " (move it with .to(Device::cuda()))");
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  KILN_CHECK(a.device() == b.device(), op, ": operands are on different devices (", a.device().str(), " and ",
             b.device().str(), ")");
}

void check_contiguous(const Tensor& t, const char* op, const char* what) {
  KILN_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous (got strides ", shape_str(t.strides()),
             " for shape ", shape_str(t.shape()), ")");
}

void check_dtype(const Tensor& t, DType expected, const char* op, const char* what) {
  KILN_CHECK(t.dtype() == expected, op, ": ", what, " must be ", dtype_name(expected), ", got ", dtype_name(t.dtype()));
}

void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* what) {
  KILN_CHECK(t.shape() == expected, op, ": ", what, " has shape ", shape_str(t.shape()), ", expected ",
             shape_str(expected));
}

void check_floating(const Tensor& t, const char* op, const char* what) {
  KILN_CHECK(dtype_is_floating(t.dtype()), op, ": ", what, " must be f32, f64, bf16 or f16, got ",
             dtype_name(t.dtype()));
}

}  // namespace kiln::cuda
