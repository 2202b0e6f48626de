// Which bf16 (and, for elementwise ops, f16) operands a CpuBackend method computes on as they are, and which
// it stages as f32 copies instead (low_precision.h). The CPU backend follows
// these rules, and the meta device (kiln/meta) holds buffers of the staged
// copies' sizes while it stands in for this CPU, so a plan's peak counts them.
#pragma once
#include <initializer_list>
#include <vector>

#include "kiln/backend/backend.h"

namespace kiln::cpu {

// Elementwise ops on bf16 or f16 operands of one dtype and contiguous layout
// widen and round in registers; anything else low-precision is staged.
bool unary_runs_on_16_bits(const Tensor& x, const Tensor& out);
bool binary_runs_on_16_bits(const Tensor& a, const Tensor& b, const Tensor& out);
// bf16 sums and means over leading dims read bf16 directly.
bool reduce_runs_on_bf16(ReduceOp op, const Tensor& x, const Tensor& out);
// An embedding gathers bf16 rows as they are into a bf16 output.
bool embedding_gathers_stored_rows(const Tensor& weight, const Tensor& out);
// The operands a product stages: bf16 a and b stay bf16 where the CPU
// multiplies them natively, and then a bf16 output without GELU too.
std::vector<const Tensor*> matmul_staged_operands(const Tensor& a, const Tensor& b, const Tensor& out,
                                                  const MatmulArgs& args);

// A convolution runs on bf16 as it is where every operand given is bf16 and
// oneDNN has a bf16 kernel for the shapes; otherwise its low-precision
// operands are staged and the f32 kernel runs (on f32 scratch).
bool conv2d_runs_on_bf16(const Tensor& x, const Tensor& weight, std::initializer_list<const Tensor*> operands);

}  // namespace kiln::cpu
