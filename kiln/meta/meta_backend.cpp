#include "kiln/meta/meta_backend.h"

#include <atomic>
#include <map>
#include <mutex>

#include "kiln/cpu/bf16_paths.h"
#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/low_precision.h"
#include "kiln/backend/batch_invariant.h"

namespace kiln::meta {

namespace {
thread_local DeviceType modelled_device = DeviceType::cpu;
}  // namespace

ModelledDeviceScope::ModelledDeviceScope(DeviceType modelled) : previous_(modelled_device) {
  modelled_device = modelled;
}
ModelledDeviceScope::~ModelledDeviceScope() { modelled_device = previous_; }

// The CUDA backend answers yes (bf16 runs at twice TF32's rate on the tensor
// cores); the CPU's answer depends on its instructions.
bool MetaBackend::fast_bf16_to_f32_matmul() const {
  return modelled_device == DeviceType::cuda ||
         (modelled_device == DeviceType::cpu && backend_for(Device::cpu()).fast_bf16_to_f32_matmul());
}

int64_t MetaBackend::efficient_gemm_rows() const {
  return modelled_device == DeviceType::cuda ? kCudaEfficientGemmRows
                                             : backend_for(Device::cpu()).efficient_gemm_rows();
}

namespace {

// Holds, while it lives, f32 buffers the sizes of the bf16/f16 tensors among
// `operands`: what the CPU backend's F32Staging holds around the op, when the
// meta device stands in for the CPU and `stages`.
class CpuStaging {
 public:
  explicit CpuStaging(std::vector<const Tensor*> operands, bool stages = true) {
    if (!stages || modelled_device != DeviceType::cpu) return;
    MemoryCategoryScope scratch(MemoryCategory::workspace);
    for (const Tensor* t : operands)
      if (t && t->defined() && cpu::is_low_precision(t->dtype()))
        held_.push_back(Tensor::empty(t->shape(), DType::f32, t->device()));
  }

 private:
  std::vector<Tensor> held_;
};

}  // namespace

void MetaBackend::unary(UnaryOp, const Tensor& x, Tensor& out, double) {
  CpuStaging staged({&x, &out}, !cpu::unary_runs_on_16_bits(x, out));
}
void MetaBackend::binary(BinaryOp, const Tensor& a, const Tensor& b, Tensor& out) {
  CpuStaging staged({&a, &b, &out}, !cpu::binary_runs_on_16_bits(a, b, out));
}
void MetaBackend::reduce(ReduceOp op, const Tensor& x, Tensor& out) {
  CpuStaging staged({&x, &out}, !cpu::reduce_runs_on_bf16(op, x, out));
}
void MetaBackend::argmax(const Tensor& x, int, Tensor&) { CpuStaging staged({&x}); }
void MetaBackend::matmul(const Tensor& a, const Tensor& b, Tensor& out, const MatmulArgs& args) {
  CpuStaging staged(cpu::matmul_staged_operands(a, b, out, args));
}
void MetaBackend::softmax(const Tensor& x, Tensor& out, bool) { CpuStaging staged({&x, &out}); }
void MetaBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool) {
  CpuStaging staged({&y, &dy, &dx});
}
void MetaBackend::cross_entropy(const Tensor& logits, const Tensor&, Tensor& losses, Tensor& dlogits, float,
                                int64_t) {
  CpuStaging staged({&logits, &losses, &dlogits});
}
void MetaBackend::layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float, Tensor& y, Tensor& mean,
                            Tensor& rstd) {
  CpuStaging staged({&x, &weight, &bias, &y, &mean, &rstd});
}
void MetaBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  CpuStaging staged({&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias});
}
void MetaBackend::embedding(const Tensor& weight, const Tensor&, Tensor& out) {
  CpuStaging staged({&weight, &out}, !cpu::embedding_gathers_stored_rows(weight, out));
}
void MetaBackend::embedding_backward(const Tensor& dout, const Tensor&, Tensor& dweight) {
  CpuStaging staged({&dout, &dweight});
}
void MetaBackend::dropout_mask(Tensor& mask, float, uint64_t, uint64_t) { CpuStaging staged({&mask}); }
// Both work in place or on per-thread scratch outside the allocator.
void MetaBackend::paged_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                                  float, float) {}
void MetaBackend::scatter_rows(const Tensor&, const Tensor&, int64_t, Tensor&) {}
// bf16 attention runs on its operands (scratch outside the allocator); f16 stages them all.
void MetaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float, bool) {
  CpuStaging staged({&q, &k, &v, &out, &lse}, q.dtype() != DType::bf16);
}
void MetaBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, float,
                                     bool) {
  CpuStaging staged({&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv}, q.dtype() != DType::bf16);
}

void MetaBackend::copy(const Tensor& src, Tensor& dst) {
  KILN_CHECK(dst.device().type == DeviceType::meta, "a meta tensor has no values to copy to ", dst.device().str(),
             ": meta tensors are for planning (shapes and bytes only)");
}

namespace {

// The scratch the CPU's convolution kernel takes, in the dtype it runs in.
void touch_scratch(const Tensor& x, const Tensor& weight, const Conv2dArgs& args, const cpu::ConvScratchPass& pass,
                   DType kernel) {
  MemoryCategoryScope scope(MemoryCategory::workspace);
  std::vector<Tensor> scratch;
  for (int64_t n : cpu::conv2d_scratch_elements(x.shape(), weight.shape(), args, kernel, pass))
    scratch.push_back(Tensor::empty({n}, kernel, x.device()));
}

// A low-precision convolution the CPU does not run on bf16 runs the f32
// kernel on staged copies (cpu/conv2d.cpp).
DType conv_kernel_dtype(const Tensor& x, bool native_bf16) {
  return native_bf16 || !cpu::is_low_precision(x.dtype()) ? x.dtype() : DType::f32;
}

}  // namespace

void MetaBackend::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                         const Conv2dArgs& args) {
  const bool native = cpu::conv2d_runs_on_bf16(x, weight, {&x, &weight, &out});
  // oneDNN's bf16 kernels take an f32 bias; the f32 kernel takes every operand in f32.
  CpuStaging staged(native ? std::vector<const Tensor*>{&bias} : std::vector<const Tensor*>{&x, &weight, &bias, &out});
  cpu::ConvScratchPass pass;
  pass.bias = bias.defined();
  touch_scratch(x, weight, args, pass, conv_kernel_dtype(x, native));
}

void MetaBackend::conv2d_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, Tensor& dx,
                                  Tensor& dweight, Tensor& dbias, const Conv2dArgs& args) {
  const bool native = cpu::conv2d_runs_on_bf16(x, weight, {&dout, &x, &weight, &dx, &dweight});
  if (native) CpuStaging bias_gradient({&dbias});  // summed in f32 and released before oneDNN's pass
  CpuStaging staged(native ? std::vector<const Tensor*>{}
                           : std::vector<const Tensor*>{&dout, &x, &weight, &dx, &dweight, &dbias});
  cpu::ConvScratchPass pass;
  pass.backward = true;
  pass.dx = dx.defined();
  pass.dweight = dweight.defined();
  touch_scratch(x, weight, args, pass, conv_kernel_dtype(x, native));
}

namespace {

// Hands out distinct, aligned, never-dereferenced addresses and holds no
// memory: the counts (kept by Allocator) are the point.
class MetaAllocator final : public Allocator {
 public:
  explicit MetaAllocator(int index) : index_(index) {}
  std::string device_name() const override { return index_ == 0 ? "meta" : "meta:" + std::to_string(index_); }

 protected:
  void* raw_allocate(size_t bytes) override {
    const uintptr_t at = next_.fetch_add((std::max<size_t>(bytes, 1) + 63) / 64 * 64);
    return reinterpret_cast<void*>(at);
  }
  void raw_deallocate(void*, size_t) override {}

 private:
  int index_;
  std::atomic<uintptr_t> next_{uintptr_t(1) << 44};
};

Allocator* meta_allocator_factory(int index) {
  static std::mutex mutex;
  static std::map<int, MetaAllocator*> allocators;  // never destroyed, as the CPU's
  std::lock_guard<std::mutex> lock(mutex);
  MetaAllocator*& a = allocators[index];
  if (!a) a = new MetaAllocator(index);
  return a;
}

}  // namespace

}  // namespace kiln::meta

namespace kiln {

Backend* meta_backend_instance() {
  static meta::MetaBackend backend;
  static const bool registered = [] {
    register_allocator(DeviceType::meta, &meta::meta_allocator_factory);
    return true;
  }();
  (void)registered;
  return &backend;
}

}  // namespace kiln
