// AdamW and SGD over every parameter in one launch (multi-tensor apply).
//
// The host builds a table of tensors (pointers, sizes, dtypes) and of chunks
// (tensor index, first element; 16K elements each), uploads it through pinned
// staging, and launches one grid whose blocks walk the chunks. Each tensor may
// have its own dtype (f32/f64/bf16/f16, read and written by a per-tensor
// switch that is uniform within a block); f64 parameters update in f64,
// all others in f32.
//
//  AdamW (PyTorch's, decoupled weight decay):
//    g = grad * grad_scale;  p *= 1 - lr*wd
//    m = b1*m + (1-b1)*g;    v = b2*v + (1-b2)*g^2
//    p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
//  SGD (PyTorch's, no dampening):
//    g = grad * grad_scale + wd*p
//    buf = first_step ? g : momentum*buf + g;  g = nesterov ? g + momentum*buf : buf
//    p -= lr * g
#include <cmath>
#include <vector>

#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/device_math.cuh"

namespace kiln::cuda {
namespace {

constexpr int64_t kChunk = 16 * 1024;

struct TensorSlot {
  void* param;
  const void* grad;
  void* m;
  void* v;
  int64_t numel;
  uint8_t param_t, grad_t, m_t, v_t;
  bool f32x4;  // all four f32 and 16-byte aligned: AdamW reads them 16 bytes a lane
};

struct ChunkRef {
  int64_t tensor;
  int64_t start;
};

struct StepArgs {
  // AdamW
  double lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2_sqrt;
  // SGD
  double momentum;
  bool nesterov, first_step, adamw;
  float grad_scale;
};

template <typename A>
__device__ __forceinline__ A load(const void* p, uint8_t t, int64_t i) {
  switch (DType(t)) {
    case DType::f32:
      return A(static_cast<const float*>(p)[i]);
    case DType::f64:
      return A(static_cast<const double*>(p)[i]);
    case DType::bf16:
      return A(__bfloat162float(static_cast<const bf16*>(p)[i]));
    case DType::f16:
      return A(__half2float(static_cast<const f16*>(p)[i]));
    default:
      return A(0);
  }
}

template <typename A>
__device__ __forceinline__ void store(void* p, uint8_t t, int64_t i, A v) {
  switch (DType(t)) {
    case DType::f32:
      static_cast<float*>(p)[i] = float(v);
      break;
    case DType::f64:
      static_cast<double*>(p)[i] = double(v);
      break;
    case DType::bf16:
      static_cast<bf16*>(p)[i] = __float2bfloat16_rn(float(v));
      break;
    case DType::f16:
      static_cast<f16*>(p)[i] = __float2half_rn(float(v));
      break;
    default:
      break;
  }
}

// One AdamW update in f32, the arithmetic of update_chunk's.
__device__ __forceinline__ void adamw_f32(float& p, float g, float& m, float& v, const StepArgs& a) {
  g *= a.grad_scale;
  p *= 1.0f - float(a.lr) * float(a.weight_decay);
  m = float(a.beta1) * m + (1.0f - float(a.beta1)) * g;
  v = float(a.beta2) * v + (1.0f - float(a.beta2)) * g * g;
  const float denom = sqrt_acc(v) / float(a.bias_correction2_sqrt) + float(a.eps);
  p -= (float(a.lr) / float(a.bias_correction1)) * m / denom;
}

// AdamW over f32 tensors, four elements a load; start is a multiple of 4
// (chunks are), the tensor's last few elements one at a time.
__device__ void adamw_chunk_f32x4(const TensorSlot& s, int64_t start, int64_t end, const StepArgs& a) {
  float4* p4 = static_cast<float4*>(s.param);
  const float4* g4 = static_cast<const float4*>(s.grad);
  float4 *m4 = static_cast<float4*>(s.m), *v4 = static_cast<float4*>(s.v);
  for (int64_t i = start / 4 + threadIdx.x; i < end / 4; i += blockDim.x) {
    float4 p = p4[i], m = m4[i], v = v4[i];
    const float4 g = g4[i];
    adamw_f32(p.x, g.x, m.x, v.x, a);
    adamw_f32(p.y, g.y, m.y, v.y, a);
    adamw_f32(p.z, g.z, m.z, v.z, a);
    adamw_f32(p.w, g.w, m.w, v.w, a);
    p4[i] = p;
    m4[i] = m;
    v4[i] = v;
  }
  for (int64_t i = end / 4 * 4 + threadIdx.x; i < end; i += blockDim.x) {
    float* p = static_cast<float*>(s.param);
    float *m = static_cast<float*>(s.m), *v = static_cast<float*>(s.v);
    adamw_f32(p[i], static_cast<const float*>(s.grad)[i], m[i], v[i], a);
  }
}

template <typename A>
__device__ void update_chunk(const TensorSlot& s, int64_t start, int64_t end, const StepArgs& a) {
  if constexpr (sizeof(A) == 4) {
    if (a.adamw && s.f32x4) return adamw_chunk_f32x4(s, start, end, a);
  }
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    A p = load<A>(s.param, s.param_t, i);
    A g = load<A>(s.grad, s.grad_t, i) * A(a.grad_scale);
    if (a.adamw) {
      p *= A(1) - A(a.lr) * A(a.weight_decay);
      A m = load<A>(s.m, s.m_t, i), v = load<A>(s.v, s.v_t, i);
      m = A(a.beta1) * m + (A(1) - A(a.beta1)) * g;
      v = A(a.beta2) * v + (A(1) - A(a.beta2)) * g * g;
      const A denom = sqrt_acc(v) / A(a.bias_correction2_sqrt) + A(a.eps);
      p -= (A(a.lr) / A(a.bias_correction1)) * m / denom;
      store(s.m, s.m_t, i, m);
      store(s.v, s.v_t, i, v);
    } else {
      if (a.weight_decay != 0.0) g += A(a.weight_decay) * p;
      if (a.momentum != 0.0) {
        A buf = a.first_step ? g : A(a.momentum) * load<A>(s.m, s.m_t, i) + g;
        store(s.m, s.m_t, i, buf);
        g = a.nesterov ? g + A(a.momentum) * buf : buf;
      }
      p -= A(a.lr) * g;
    }
    store(s.param, s.param_t, i, p);
  }
}

__global__ void multi_tensor_step_kernel(const TensorSlot* slots, const ChunkRef* chunks, int64_t n_chunks,
                                         StepArgs a) {
  for (int64_t c = blockIdx.x; c < n_chunks; c += gridDim.x) {
    const ChunkRef ref = chunks[c];
    const TensorSlot s = slots[ref.tensor];
    const int64_t end = min(s.numel, ref.start + kChunk);
    if (DType(s.param_t) == DType::f64)
      update_chunk<double>(s, ref.start, end, a);
    else
      update_chunk<float>(s, ref.start, end, a);
  }
}

// Each tensor of the table lives on the first parameter's device; a
// gradient or state tensor also has its own parameter's shape.
void check_slot(const Tensor& t, const Tensor& first_param, const char* op, const char* what) {
  check_cuda(t, op, what);
  check_same_device(t, first_param, op);
  check_floating(t, op, what);
  check_contiguous(t, op, what);
}

void run_step(std::vector<ParamSlots>& params, StepArgs a, bool needs_m, bool needs_v, const char* op) {
  if (params.empty()) return;
  const Device device = params[0].param.device();
  std::vector<TensorSlot> slots;
  std::vector<ChunkRef> chunks;
  for (ParamSlots& p : params) {
    const Tensor& first = params[0].param;
    check_slot(p.param, first, op, "param");
    check_slot(p.grad, first, op, "grad");
    check_shape(p.grad, p.param.shape(), op, "grad");
    if (needs_m) {
      const char* m_name = a.adamw ? "m (exp_avg)" : "m (momentum buffer)";
      check_slot(p.m, first, op, m_name);
      check_shape(p.m, p.param.shape(), op, m_name);
    }
    if (needs_v) {
      check_slot(p.v, first, op, "v (exp_avg_sq)");
      check_shape(p.v, p.param.shape(), op, "v (exp_avg_sq)");
    }
    const int64_t n = p.param.numel();
    if (n == 0) continue;
    TensorSlot s{p.param.data_ptr(),
                 p.grad.data_ptr(),
                 needs_m ? p.m.data_ptr() : nullptr,
                 needs_v ? p.v.data_ptr() : nullptr,
                 n,
                 uint8_t(p.param.dtype()),
                 uint8_t(p.grad.dtype()),
                 uint8_t(needs_m ? p.m.dtype() : DType::f32),
                 uint8_t(needs_v ? p.v.dtype() : DType::f32),
                 false};
    auto f32_aligned = [](const Tensor& t) { return t.dtype() == DType::f32 && aligned_to(t, 16); };
    s.f32x4 = needs_m && needs_v && f32_aligned(p.param) && f32_aligned(p.grad) && f32_aligned(p.m) &&
              f32_aligned(p.v);
    for (int64_t start = 0; start < n; start += kChunk) chunks.push_back({int64_t(slots.size()), start});
    slots.push_back(s);
  }
  if (chunks.empty()) return;
  const int dev = device.index;
  DeviceGuard guard(dev);
  const size_t slot_bytes = slots.size() * sizeof(TensorSlot), chunk_bytes = chunks.size() * sizeof(ChunkRef);
  const size_t slot_padded = (slot_bytes + 15) / 16 * 16;
  Tensor table = empty_workspace({int64_t(slot_padded + chunk_bytes)}, DType::u8, device);
  char* base = static_cast<char*>(table.data_ptr());
  upload_async(slots.data(), base, slot_bytes, dev);
  upload_async(chunks.data(), base + slot_padded, chunk_bytes, dev);
  const int64_t n_chunks = int64_t(chunks.size());
  const unsigned grid = unsigned(std::min<int64_t>(n_chunks, int64_t(device_state(dev).sm_count) * 8));
  multi_tensor_step_kernel<<<grid, 256, 0, stream_for(dev)>>>(
      reinterpret_cast<const TensorSlot*>(base), reinterpret_cast<const ChunkRef*>(base + slot_padded), n_chunks, a);
  KILN_CUDA_CHECK_LAUNCH();
  // `table` returns to the cache now; the next user of the block is queued after this kernel.
}

}  // namespace

void CudaBackend::adamw_step(std::vector<ParamSlots>& params, const AdamWArgs& args) {
  KILN_CHECK(args.step >= 1, "adamw_step: step is 1-based, got ", args.step);
  StepArgs a{};
  a.adamw = true;
  a.lr = args.lr;
  a.beta1 = args.beta1;
  a.beta2 = args.beta2;
  a.eps = args.eps;
  a.weight_decay = args.weight_decay;
  a.bias_correction1 = 1.0 - std::pow(double(args.beta1), double(args.step));
  a.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(double(args.beta2), double(args.step)));
  a.grad_scale = args.grad_scale;
  run_step(params, a, true, true, "adamw_step");
}

void CudaBackend::sgd_step(std::vector<ParamSlots>& params, const SgdArgs& args) {
  KILN_CHECK(!args.nesterov || args.momentum != 0.0f, "sgd_step: nesterov needs a non-zero momentum");
  StepArgs a{};
  a.adamw = false;
  a.lr = args.lr;
  a.momentum = args.momentum;
  a.weight_decay = args.weight_decay;
  a.nesterov = args.nesterov;
  a.first_step = args.first_step;
  a.grad_scale = args.grad_scale;
  run_step(params, a, args.momentum != 0.0f, false, "sgd_step");
}

}  // namespace kiln::cuda
