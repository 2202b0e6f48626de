// Attention heads in bf16 on CPUs with AVX512-BF16, in Kiln's own kernels:
// the products are register tiles of vdpbf16ps (bf16 pairs, f32 sums) on
// operands packed once per head, instead of library GEMM calls. At a GPT's
// head sizes ([128, 32]) a oneDNN call costs about as much in overhead as
// its arithmetic, and a head is 14 of them; these tiles also follow the
// causal mask 16 keys at a time instead of 64. kiln/cpu/attention.cpp
// calls them where they apply (head size a multiple of 16) and its
// oneDNN products elsewhere; the maths, and where bf16 rounding happens
// (P and dS, as flash attention), are the same.
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

namespace kiln::cpu {

// A bf16 head: its first row and the distance between rows, in elements.
struct Bf16Rows {
  const uint16_t* p;
  int64_t ld;
};

// Tests turn the kernels off to check the oneDNN path on the same machine.
inline std::atomic<bool> bf16_attention_kernels_allowed{true};

// True if this CPU has AVX512-BF16 and heads of this size fit the kernels.
bool bf16_attention_kernels_apply(int64_t head_size);

// Per-thread buffers for a head's packed operands, scores and outputs; they
// grow to the largest head seen.
struct Bf16AttentionScratch {
  std::vector<float> floats;
  std::vector<uint32_t> words;
};

// One head, forward: out (bf16 rows, ld out_ld) = softmax(scale Q K^T) V,
// and lse (f32) the rows' log-sum-exp.
void bf16_attention_head(Bf16Rows q, Bf16Rows k, Bf16Rows v, uint16_t* out, int64_t out_ld, float* lse, int64_t seq,
                         int64_t D, float scale, bool causal, Bf16AttentionScratch& scratch);

// One head, backward: dq, dk, dv (bf16 rows) from dout and the forward's
// q, k, v, out and lse.
struct Bf16HeadGrads {
  uint16_t *dq, *dk, *dv;
  int64_t dq_ld, dk_ld, dv_ld;
};
void bf16_attention_head_backward(Bf16Rows dout, Bf16Rows q, Bf16Rows k, Bf16Rows v, Bf16Rows out, const float* lse,
                                  Bf16HeadGrads grads, int64_t seq, int64_t D, float scale, bool causal,
                                  Bf16AttentionScratch& scratch);

}  // namespace kiln::cpu
