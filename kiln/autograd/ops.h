// Differentiable operations. Each runs the backend op for its inputs' device
// and, when gradients are enabled and an input requires them, records a
// GradNode whose backward is written with these same ops.
#pragma once
#include <optional>
#include <functional>
#include <vector>

#include "kiln/autograd/grad_mode.h"
#include "kiln/backend/backend.h"
#include "kiln/backend/factory.h"
#include "kiln/core/random.h"

namespace kiln {

// ---- elementwise (binary ops broadcast)
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& x, double s);
Tensor mul_scalar(const Tensor& x, double s);
Tensor pow_scalar(const Tensor& x, double exponent);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // tanh approximation (GPT-2)
Tensor gelu_erf(const Tensor& x);  // exact, x * Phi(x) (BERT; torch.nn.GELU())
Tensor square(const Tensor& x);
// Comparisons give 0/1 in the operands' dtype and record no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return add_scalar(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return add_scalar(x, -s); }
inline Tensor operator*(const Tensor& x, double s) { return mul_scalar(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return mul_scalar(x, 1.0 / s); }
inline Tensor operator*(double s, const Tensor& x) { return mul_scalar(x, s); }

// ---- reductions (dims may be negative; empty dims = all)
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim);  // i64, no gradient
// Sums a broadcast gradient back down to `shape`.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- shape and layout (views where possible)
Tensor reshape(const Tensor& x, const Shape& shape);  // one dim may be -1
Tensor view(const Tensor& x, const Shape& shape);     // never copies; throws if impossible
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 1);
Tensor contiguous(const Tensor& x);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
Tensor to_dtype(const Tensor& x, DType dtype);
Tensor to_device(const Tensor& x, Device device);

// ---- linear algebra
// a [..., M, K] @ b [..., K, N] with broadcast batch dims; 1-D operands are
// not supported (reshape first).
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., in] @ weight[out, in]^T + bias[out] (bias may be undefined).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// The same, but its backward node keeps `recompute_x` (which returns x's
// values, e.g. by re-running a cheap GELU or layernorm on a tensor that is
// kept anyway) instead of x: selective activation checkpointing.
Tensor linear_recomputing_input(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                std::function<Tensor()> recompute_x);
// linear(gelu(h), weight, bias), the GPT MLP's second half, computed a
// quarter of the rows at a time. keep_gelu_output = false (selective
// checkpointing) never holds gelu(h) whole and recomputes it in backward;
// true keeps it, as the unfused pair would. Both give the same bits.
Tensor linear_of_gelu(const Tensor& h, const Tensor& weight, const Tensor& bias, bool keep_gelu_output);

// ---- nn
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
// Mean cross-entropy of logits [N, C] (or [..., C]) against i64/i32 targets
// [N] (or [...]); rows whose target is ignore_index are left out of the mean.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// The same, for a caller that is done with `logits` (a model's loss): their
// buffer receives the gradient, so logits and gradient never take memory at
// once (as llm.c does). The logits' values are gone afterwards.
Tensor cross_entropy_overwriting_logits(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// cross_entropy(linear(x, weight), targets) without ever holding the logits
// (as Liger's fused linear cross-entropy): x [..., C], weight [V, C]. Row
// chunks of logits are computed, turned into their gradient at once, and
// folded into dx and dweight during forward; backward only scales those by
// the incoming gradient. Memory: one chunk of logits plus dx and dweight,
// instead of all the logits and their gradient.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t ignore_index = -100);
// The targets a cross-entropy counts (its mean's divisor): those that are not ignore_index.
int64_t count_valid_targets(const Tensor& targets, int64_t ignore_index = -100);
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// layer_norm for an output that only matrix products read: under autocast
// it is written in the autocast dtype, as such a product would cast it. The
// same values as layer_norm then the cast, forward and backward, without
// the f32 output and the two casts.
Tensor layer_norm_for_matmul(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// RMSNorm over the last dim (Llama's; plus_one: Gemma's, scaling by 1 +
// weight), computed as transformers computes it (backend.h): x and weight of
// one dtype; a model whose activations and norm weights differ in dtype
// (autocast) composes the norm of elementwise ops instead.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps, bool plus_one = false);
// Rotary position embedding, x * cos + rotate_half(x) * sin over the first
// cos.size(-1) dims of x [..., D] (the rest pass through), in one pass:
// cos and sin broadcast against x's leading dims and take no gradient; mixed
// float dtypes promote to the wider one.
Tensor rotary(const Tensor& x, const Tensor& cos, const Tensor& sin);
// SwiGLU's product silu(gate) * up = gate * sigmoid(gate) * up in one pass,
// with the bits of the three ops it replaces (mixed dtypes run those ops).
Tensor silu_mul(const Tensor& gate, const Tensor& up);
// padding_idx (PyTorch's nn.Embedding's): that row's gradient stays zero.
Tensor embedding(const Tensor& weight, const Tensor& ids, std::optional<int64_t> padding_idx = std::nullopt);
// Quantized weights (kiln/core/quantized.h, ops_quantized.cpp): x [..., K]
// times w [N, K]^T plus bias -> [..., N], and the rows `ids` of w -> [..., K],
// both in w.dtype (the dtype w was quantized from). w and the bias are frozen;
// x's gradient flows through w dequantized (LoRA on a quantized base), and
// `w` must outlive the graph (its layer does).
Tensor quantized_linear(const Tensor& x, const QuantizedMatrix& w, const Tensor& bias);
Tensor quantized_embedding(const QuantizedMatrix& w, const Tensor& ids);
// Inference over a paged KV cache (backend.h's paged_attention; the pages
// and tables come from kiln/nn/kv_cache.h): q [R, H, D] -> [R, H, D];
// softcap > 0 caps the scores (Gemma 2). No gradients.
Tensor paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const Tensor& tables,
                       const Tensor& spans, double scale, double softcap = 0);
// Element c of src's row r ([R, C]) -> dst's flat element offsets[r] + c *
// column_stride, in place (backend.h's scatter_rows). offsets: i64 [R] on
// dst's device. No gradients.
void scatter_rows_(Tensor& dst, const Tensor& offsets, int64_t column_stride, const Tensor& src);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride = 1, int64_t padding = 0);
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0);
// Inverted dropout; the mask is drawn from `gen` (identical on every backend).
Tensor dropout(const Tensor& x, double p, Generator& gen);
// q, k, v [B, H, T, D] -> [B, H, T, D], softmax(q k^T * scale) v.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal);
// The same on q, k and v packed as a [B, T, 3 * H * D] projection (GPT's
// c_attn output, q | k | v along the last dim) -> [B, H, T, D]. The kernels
// read the heads straight out of it and write its gradient whole: no head
// is copied out, and no zero-filled gradient is summed from three slices.
// The result is a view of [B, T, H, D] memory, so transpose(1, 2) of it is
// contiguous: merging the heads is free.
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_head, bool causal);

}  // namespace kiln
