// The CPU backend: the reference every other backend is checked against.
// OpenBLAS does matrix products; everything else is OpenMP loops written so
// the compiler can vectorise the contiguous case. Reductions use a fixed
// order per output element, so results do not depend on the thread count.
//
// One op family per file: elementwise.cpp, reduce.cpp, matmul.cpp,
// softmax.cpp, cross_entropy.cpp, layernorm.cpp (and RMSNorm), rotary.cpp, silu_mul.cpp, embedding.cpp, conv2d.cpp,
// maxpool2d.cpp, dropout.cpp, attention.cpp, optimizers.cpp, quantized_matmul.cpp.
#pragma once
#include "kiln/backend/backend.h"

namespace kiln::cpu {

// Which call of a convolution a scratch query is about.
struct ConvScratchPass {
  bool backward = false;
  bool bias = false;                 // forward: a bias is added
  bool dx = false, dweight = false;  // backward: which gradients are wanted
};

// The element counts (of `dtype` elements) of the scratch buffers one
// conv2d or conv2d_backward call on `dtype` operands allocates, booked as
// workspace: oneDNN's blocked copies and scratchpad, or the im2col buffers.
// The meta backend allocates the same, so plans match the CPU.
std::vector<int64_t> conv2d_scratch_elements(const Shape& x, const Shape& weight, const Conv2dArgs& args,
                                             DType dtype, const ConvScratchPass& pass);

class CpuBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::cpu; }
  bool fast_bf16_to_f32_matmul() const override;
  std::string name() const override { return "cpu"; }
  int device_count() const override { return 1; }
  void synchronize(int) override {}

  void copy(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& dst, double value) override;
  void unary(UnaryOp op, const Tensor& x, Tensor& out, double scalar) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& x, Tensor& out) override;
  void argmax(const Tensor& x, int dim, Tensor& out) override;
  void matmul(const Tensor& a, const Tensor& b, Tensor& out, const MatmulArgs& args) override;

  void softmax(const Tensor& x, Tensor& out, bool log) override;
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& dlogits,
                     float dlogits_scale, int64_t ignore_index) override;
  void layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y, Tensor& mean,
                 Tensor& rstd) override;
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, bool plus_one, Tensor& y, Tensor& rstd) override;
  void rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) override;
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) override;
  void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) override;
  void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
              const Conv2dArgs& args) override;
  void conv2d_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, Tensor& dx, Tensor& dweight,
                       Tensor& dbias, const Conv2dArgs& args) override;
  void maxpool2d(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dArgs& args) override;
  void maxpool2d_backward(const Tensor& dout, const Tensor& indices, Tensor& dx) override;
  void dropout_mask(Tensor& mask, float p, uint64_t seed, uint64_t offset) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                 bool causal) override;
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, float scale,
                          bool causal) override;
  void paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const Tensor& tables,
                       const Tensor& spans, Tensor& out, float scale, float softcap) override;
  void scatter_rows(const Tensor& src, const Tensor& offsets, int64_t column_stride, Tensor& dst) override;
  void quantized_matmul(const Tensor& x, const QuantizedMatrix& w, Tensor& out) override;
  void quantized_embedding(const QuantizedMatrix& w, const Tensor& ids, Tensor& out) override;
  void adamw_step(std::vector<ParamSlots>& params, const AdamWArgs& args) override;
  void sgd_step(std::vector<ParamSlots>& params, const SgdArgs& args) override;
};

}  // namespace kiln::cpu
