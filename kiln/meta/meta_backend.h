// The meta device: tensors with shapes, dtypes and byte counts, and no data.
// Every op is accepted and computes nothing, so the real model code (the
// recipe's forward, backward and optimizer step) runs in microseconds per
// op whatever the model's size, while the allocator records every
// allocation and free with its category. That is how `kiln plan` predicts
// memory: from the engine, not from a formula (docs/MEMORY.md).
//
// Shapes are checked where they always are (the autograd ops, before they
// call a backend). Reading a meta tensor's values (item(), to_vector(), a
// copy to the CPU) is an error: there are none.
#pragma once
#include "kiln/backend/backend.h"

namespace kiln::meta {

// The real device the meta device stands in for, on this thread while the
// scope lives (default: this CPU). A backend's choices that change what the
// ops allocate (Backend::fast_bf16_to_f32_matmul: whether bf16 autocast's
// cross-entropy narrows its operands to bf16 copies) follow that device, so
// a plan for a GPU and a plan for this CPU each count their own.
class ModelledDeviceScope {
 public:
  explicit ModelledDeviceScope(DeviceType modelled);
  ~ModelledDeviceScope();

 private:
  DeviceType previous_;
};

class MetaBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::meta; }
  std::string name() const override { return "meta"; }
  int device_count() const override { return 1 << 20; }
  void synchronize(int) override {}
  // Into a meta tensor: nothing to move. Out of one: there are no values.
  void copy(const Tensor& src, Tensor& dst) override;
  // The ops compute nothing. Standing in for this CPU (ModelledDeviceScope),
  // they allocate and free the buffers the CPU backend's would: f32 copies
  // of the bf16 operands it stages (kiln/cpu/bf16_paths.h), convolution
  // scratch. Both are workspace, so a plan's peak includes them as the
  // CPU's measured one does.
  void fill(Tensor& dst, double value) override {}
  void unary(UnaryOp op, const Tensor& x, Tensor& out, double scalar) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& x, Tensor& out) override;
  void argmax(const Tensor& x, int dim, Tensor& out_i64) override;
  void matmul(const Tensor& a, const Tensor& b, Tensor& out, const MatmulArgs& args) override;
  bool fast_bf16_to_f32_matmul() const override;
  int64_t efficient_gemm_rows() const override;
  void softmax(const Tensor& x, Tensor& out, bool log) override;
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& dlogits, float dlogits_scale,
                     int64_t ignore_index) override;
  void layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y, Tensor& mean,
                 Tensor& rstd) override;
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) override;
  // Written in place, with no staging (kiln/cpu/layernorm.cpp, rotary.cpp, silu_mul.cpp).
  void rms_norm(const Tensor&, const Tensor&, float, bool, Tensor&, Tensor&) override {}
  void rotary(const Tensor&, const Tensor&, const Tensor&, Tensor&) override {}
  void silu_mul(const Tensor&, const Tensor&, Tensor&) override {}
  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override;
  // The CPU's work on per-thread scratch outside the allocator.
  void quantized_matmul(const Tensor&, const QuantizedMatrix&, Tensor&) override {}
  void quantized_embedding(const QuantizedMatrix&, const Tensor&, Tensor&) override {}
  void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) override;
  void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, const Conv2dArgs& args) override;
  void conv2d_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, Tensor& dx, Tensor& dweight,
                       Tensor& dbias, const Conv2dArgs& args) override;
  void maxpool2d(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dArgs& args) override {}
  void maxpool2d_backward(const Tensor& dout, const Tensor& indices, Tensor& dx) override {}
  void dropout_mask(Tensor& mask, float p, uint64_t seed, uint64_t offset) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                 bool causal) override;
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, float scale, bool causal) override;
  void paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const Tensor& tables,
                       const Tensor& spans, Tensor& out, float scale, float softcap) override;
  void scatter_rows(const Tensor& src, const Tensor& offsets, int64_t column_stride, Tensor& dst) override;
  void adamw_step(std::vector<ParamSlots>& params, const AdamWArgs& args) override {}
  void sgd_step(std::vector<ParamSlots>& params, const SgdArgs& args) override {}
};

}  // namespace kiln::meta
