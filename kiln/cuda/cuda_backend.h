// The CUDA backend. One op family per file, each with its kernels and the
// member function that launches them: copy.cu, elementwise.cu, reduce.cu,
// matmul.cpp (+ matmul_epilogue.cu), softmax.cu, cross_entropy.cu,
// layernorm.cu (and RMSNorm), rotary.cu, silu_mul.cu, embedding.cu, conv2d.cpp (+ im2col.cu), maxpool2d.cu,
// dropout.cu, attention.cu, attention_backward.cu, optimizers.cu.
// Device state, streams and the allocator: cuda_backend.cpp, allocator.cpp.
//
// Semantics follow the CPU backend (the reference, kiln/cpu); bf16/f16 inputs
// compute in f32. Every op runs asynchronously on its device's single
// compute stream, except where it must read a result back (device-to-host
// copies); ids that ops validate are checked at that synchronisation.
#pragma once
#include "kiln/backend/backend.h"

namespace kiln::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_count) : device_count_(device_count) {}
  DeviceType type() const override { return DeviceType::cuda; }
  std::string name() const override { return "cuda"; }
  int device_count() const override { return device_count_; }
  void synchronize(int device_index) override;

  void copy(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& dst, double value) override;
  void copy_to_host_async(const Tensor& src, Tensor& dst) override;  // host_transfer.cpp
  void finish_host_copies(int device_index) override;
  void pin_host_memory(const Tensor& host) override;
  void unpin_host_memory(const Tensor& host) override;
  void unary(UnaryOp op, const Tensor& x, Tensor& out, double scalar) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& x, Tensor& out) override;
  void argmax(const Tensor& x, int dim, Tensor& out) override;
  void matmul(const Tensor& a, const Tensor& b, Tensor& out, const MatmulArgs& args) override;
  void matmul_and_row_sums(const Tensor& a, const Tensor& b, Tensor& out, Tensor& row_sums) override;
  // bf16 operands into an f32 out, at twice TF32's rate on the tensor cores.
  bool fast_bf16_to_f32_matmul() const override { return true; }
  int64_t efficient_gemm_rows() const override { return kCudaEfficientGemmRows; }

  void softmax(const Tensor& x, Tensor& out, bool log) override;
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& dlogits, float dlogits_scale,
                     int64_t ignore_index) override;
  void layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y, Tensor& mean,
                 Tensor& rstd) override;
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, bool plus_one, Tensor& y, Tensor& rstd) override;
  void rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) override;
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override;
  void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) override;
  void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, const Conv2dArgs& args) override;
  void conv2d_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, Tensor& dx, Tensor& dweight,
                       Tensor& dbias, const Conv2dArgs& args) override;
  void maxpool2d(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dArgs& args) override;
  void maxpool2d_backward(const Tensor& dout, const Tensor& indices, Tensor& dx) override;
  void dropout_mask(Tensor& mask, float p, uint64_t seed, uint64_t offset) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                 bool causal) override;
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, float scale, bool causal) override;
  void paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const Tensor& tables,
                       const Tensor& spans, Tensor& out, float scale, float softcap) override;
  void scatter_rows(const Tensor& src, const Tensor& offsets, int64_t column_stride, Tensor& dst) override;
  void adamw_step(std::vector<ParamSlots>& params, const AdamWArgs& args) override;
  void sgd_step(std::vector<ParamSlots>& params, const SgdArgs& args) override;

 private:
  // matmul, and with row_sums (2-D only) matmul_and_row_sums.
  void gemm(const Tensor& a, const Tensor& b, Tensor& out, const MatmulArgs& args, Tensor* row_sums);
  int device_count_;
};

// The caching allocator's factory (allocator.cpp), registered by the backend.
Allocator* caching_allocator_for(int device_index);

}  // namespace kiln::cuda
