// The seam between Kiln and a device. A backend provides memory movement and
// the op set below; everything above this header (autograd, nn, optim, apps)
// is device-agnostic and never includes a CUDA header.
//
// Conventions for every op:
//  * Inputs may be any strided view unless the op says "contiguous"; outputs
//    are allocated by the caller (kiln/autograd) and are contiguous unless
//    noted. An output may alias an input only where the op says so.
//  * Compute dtypes: the CPU computes in f32 and f64 (f64 is the gradient-check
//    reference); CUDA also computes in bf16/f16. Index tensors are i32 or i64.
//  * A backend that lacks an op throws, naming the op and the device. It never
//    falls back silently.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/quantized.h"
#include "kiln/core/tensor.h"

namespace kiln {

enum class UnaryOp : uint8_t {
  neg, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, gelu,
  gelu_erf,  // exact GELU, x * Phi(x) (BERT, torch.nn.GELU())
  abs, square, reciprocal,
  add_scalar,  // x + scalar
  mul_scalar,  // x * scalar
  pow_scalar,  // x ^ scalar
};

enum class BinaryOp : uint8_t {
  add, sub, mul, div, maximum, minimum, pow,
  eq, gt, lt,  // 1 where true, 0 where false, in the operands' dtype
  // Backward helpers: a is the incoming gradient, b the saved forward value.
  relu_backward,     // a * (x > 0), b = x
  gelu_backward,     // a * gelu'(x), b = x (tanh approximation, as GPT-2)
  gelu_erf_backward, // a * gelu_erf'(x), b = x
  tanh_backward,     // a * (1 - y^2), b = y = tanh(x)
  sigmoid_backward,  // a * y * (1 - y), b = y = sigmoid(x)
};

enum class ReduceOp : uint8_t { sum, mean, max, min };

struct MatmulArgs {
  Tensor bias;        // optional [N], added to every row
  bool gelu = false;  // apply GELU after the bias
  Tensor pre_gelu;    // optional output [.., M, N]: the value before GELU (for backward)
  float alpha = 1.0f;
  float beta = 0.0f;  // 1 accumulates into out
};

struct Conv2dArgs {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};

struct Pool2dArgs {
  int64_t kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2;
};

// One parameter's slots for an optimizer step. `v` is unused by SGD; `m` is
// SGD's momentum buffer.
struct ParamSlots {
  Tensor param, grad, m, v;
};

struct AdamWArgs {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  int64_t step = 1;        // 1-based, for bias correction
  float grad_scale = 1.0f; // grads are multiplied by this first (clipping, loss-scale undo)
};

struct SgdArgs {
  float lr = 1e-2f, momentum = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = false;  // momentum buffer starts as the gradient, as in PyTorch
  float grad_scale = 1.0f;
};

// Backend::efficient_gemm_rows() of the CUDA backend (a GEMM needs thousands
// of rows to fill an H100), which the meta device answers when it stands in
// for a GPU.
inline constexpr int64_t kCudaEfficientGemmRows = 2048;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  virtual std::string name() const = 0;
  virtual int device_count() const = 0;
  virtual void synchronize(int device_index) = 0;

  // ---- memory movement
  // Strided copy with dtype conversion; src and dst have the same shape. For
  // the CUDA backend, one side may be on the CPU (host<->device).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  virtual void fill(Tensor& dst, double value) = 0;
  // Starts copying `src` (on this backend's device) into the host tensor
  // `dst` and may return before it lands, so the copy overlaps the work
  // queued after it; `dst` must not be read before finish_host_copies. Here
  // a plain copy; the CUDA backend copies on a transfer stream.
  virtual void copy_to_host_async(const Tensor& src, Tensor& dst) { copy(src, dst); }
  virtual void finish_host_copies(int /*device_index*/) {}
  // Page-locks a contiguous host tensor so DMA to and from this backend's
  // devices runs without a bounce (cudaHostRegister); unpin before it is freed.
  virtual void pin_host_memory(const Tensor& /*host*/) {}
  virtual void unpin_host_memory(const Tensor& /*host*/) {}

  // ---- elementwise (out has the broadcast shape; a/b are already expanded to it)
  virtual void unary(UnaryOp op, const Tensor& x, Tensor& out, double scalar = 0.0) = 0;
  // a, b and out of one dtype; for BinaryOp::add, b may also be bf16/f16
  // beside f32 a and out, read as it is (autocast's residual adds).
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) = 0;

  // ---- reductions: out has x's rank; every dim where out is 1 and x is not
  // is reduced.
  virtual void reduce(ReduceOp op, const Tensor& x, Tensor& out) = 0;
  virtual void argmax(const Tensor& x, int dim, Tensor& out_i64) = 0;  // out: x's shape with dim removed

  // ---- matrix product: a [..., M, K] @ b [..., K, N] -> out [..., M, N].
  // Batch dims of a and b equal out's (broadcast already done, strides may be
  // 0). Transposed views of the last two dims are folded into the GEMM.
  virtual void matmul(const Tensor& a, const Tensor& b, Tensor& out, const MatmulArgs& args) = 0;
  // out = a @ b for a [M, K] and b [K, N], and row_sums [M] (contiguous, a's
  // dtype) = the sum of each row of a: a bias's gradient beside its weight's
  // (a = dY^T). This default multiplies, then reduces; the CUDA backend sums
  // in the GEMM's epilogue (cuBLASLt's BGRADB), so dY is read once.
  virtual void matmul_and_row_sums(const Tensor& a, const Tensor& b, Tensor& out, Tensor& row_sums);
  // Whether matmul takes bf16 a and b with an f32 out, multiplying them as
  // bf16 faster than f32 operands (ops may then narrow f32 operands to use it).
  virtual bool fast_bf16_to_f32_matmul() const { return false; }
  // Rows under which a product of [rows, K] by a large [K, N] falls well
  // below the device's rate: ops that split rows into chunks to bound memory
  // (the fused cross-entropy head) take at least this many at a time.
  virtual int64_t efficient_gemm_rows() const { return 256; }

  // ---- normalisation (all over the last dim; inputs contiguous)
  virtual void softmax(const Tensor& x, Tensor& out, bool log) = 0;
  virtual void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) = 0;
  // Fused cross-entropy over logits [N, C] and targets [N] (i32/i64; targets
  // equal to ignore_index contribute nothing). Writes the per-row loss [N]
  // (f32 or the logits' dtype) and, when dlogits is defined, the gradient
  // (softmax - onehot) * dlogits_scale. dlogits is in the logits' dtype and
  // may alias them, or is bf16/f16 beside f32 logits (rounded as written).
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& dlogits,
                             float dlogits_scale, int64_t ignore_index) = 0;
  // x [N, C]; mean and rstd [N] in f32 (f64 for f64 inputs). Beside f32 x,
  // y and (backward) dy may be bf16/f16 (autograd's layer_norm_for_matmul).
  virtual void layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                         Tensor& mean, Tensor& rstd) = 0;
  // Writes (does not accumulate) dx, dweight, dbias.
  virtual void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) = 0;
  // RMSNorm (Llama's, Gemma's): x [N, C] and weight [C] of one dtype, y
  // like x; rstd [N] f32 (f64 for f64) = 1 / sqrt(mean(x^2) + eps), summed
  // in f32 or wider. y = round(round(x * rstd) * weight), rounded to x's
  // dtype where transformers' Llama rounds (the normed row cast to the
  // weight's dtype, then the product); plus_one (Gemma, whose weight
  // starts at 0): y = round(x * rstd * (1 + weight)).
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, bool plus_one, Tensor& y, Tensor& rstd) = 0;
  // Rotary position embedding (transformers' x * cos + rotate_half(x) * sin)
  // of the first R = cos.size(-1) dims of each row of x [..., D], R even:
  // y[j] = x[j] cos[j] - x[j + R/2] sin[j] for j < R/2,
  // y[j] = x[j] cos[j] + x[j - R/2] sin[j] for R/2 <= j < R, y[j] = x[j]
  // past R. x and y contiguous; cos and sin of x's leading shape and width
  // R, rows contiguous, any strides before (0 where a table is shared);
  // one dtype, each product and the sum rounded to it as the unfused ops round.
  virtual void rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) = 0;
  // SwiGLU's product silu(gate) * up = gate * sigmoid(gate) * up: gate, up
  // and out contiguous, of one shape and dtype; the sigmoid, its product
  // with gate and the product with up each rounded to the dtype, as the
  // unfused ops round them.
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;

  // ---- nn
  // weight [V, C], ids [...] -> out [..., C]. Out-of-range ids throw.
  virtual void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) = 0;
  // Accumulates (+=) rows of dout into dweight [V, C].
  virtual void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) = 0;
  // x [N, Cin, H, W], weight [Cout, Cin, KH, KW], bias [Cout] or undefined.
  virtual void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                      const Conv2dArgs& args) = 0;
  // Writes dx, dweight, dbias; any of them may be undefined (not needed).
  virtual void conv2d_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, Tensor& dx,
                               Tensor& dweight, Tensor& dbias, const Conv2dArgs& args) = 0;
  // indices (i32, out's shape) hold the flat h*W+w position of each max.
  virtual void maxpool2d(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dArgs& args) = 0;
  virtual void maxpool2d_backward(const Tensor& dout, const Tensor& indices, Tensor& dx) = 0;  // dx zeroed here
  // mask gets 0 or 1/(1-p), drawn from a counter-based RNG (Philox4x32-10)
  // keyed by (seed, offset + element index), so every backend draws the same
  // mask.
  virtual void dropout_mask(Tensor& mask, float p, uint64_t seed, uint64_t offset) = 0;
  // Causal (if causal) attention. q, k, v, out: [B, H, T, D] contiguous;
  // lse [B, H, T] f32 (f64 for f64) holds each row's log-sum-exp for backward.
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, float scale,
                         bool causal) = 0;
  virtual void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv,
                                  float scale, bool causal) = 0;

  // ---- paged attention (vLLM's), for inference: the keys and values of many
  // sequences live in pages of one pool (kiln/nn/kv_cache.h). k_pages and
  // v_pages [N, Hkv, P, D]: N pages of P positions, each head's contiguous,
  // the keys transposed (k_pages [N, Hkv, D, P]) so that a page's scores
  // are vector lanes with no horizontal sums. tables i32 [S, max pages]:
  // sequence s's pages in order. spans i32 [R, 3]: query row r belongs to
  // sequence spans[r][0] and attends to its positions [spans[r][1],
  // spans[r][2]). q and out [R, H, D] contiguous, H a multiple of Hkv, all in
  // one dtype. Every row sums in one fixed order (its positions ascending),
  // so a row's answer never depends on the other rows in the call. softcap
  // > 0 caps each scaled score at softcap * tanh(score / softcap) (Gemma 2).
  virtual void paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const Tensor& tables,
                               const Tensor& spans, Tensor& out, float scale, float softcap) = 0;
  // Element c of src's row r ([R, C]) goes to dst's flat element
  // offsets[r] + c * column_stride (offsets i64 [R]): whole rows with
  // stride 1 (PyTorch's index_copy_), or a column of a transposed page.
  // src and dst contiguous, one dtype; every element lands inside dst.
  virtual void scatter_rows(const Tensor& src, const Tensor& offsets, int64_t column_stride, Tensor& dst) = 0;

  // ---- quantized weights (kiln/core/quantized.h), for inference; a backend
  // without them throws naming itself (the CUDA backend has none yet).
  // x [M, K] f32 contiguous, w [N, K] on this device -> out [M, N] f32.
  virtual void quantized_matmul(const Tensor& x, const QuantizedMatrix& w, Tensor& out);
  // Rows `ids` [...] of w -> out [..., K] f32.
  virtual void quantized_embedding(const QuantizedMatrix& w, const Tensor& ids, Tensor& out);

  // ---- optimizers: one call updates every parameter (few launches on GPU)
  virtual void adamw_step(std::vector<ParamSlots>& params, const AdamWArgs& args) = 0;
  virtual void sgd_step(std::vector<ParamSlots>& params, const SgdArgs& args) = 0;

 protected:
  // row_sums [M] = the sum of each row of a [M, K], reduced as a^T's columns: the layout a bias gradient's dY
  // has, which backends reduce best (and as sum(dY, {0}) always did, the same bits). matmul_and_row_sums's
  // reduction, where a backend does not sum in the product.
  void sum_rows(const Tensor& a, Tensor& row_sums);
};

// The backend for a device. Throws a clear error (what is missing and what to
// do) if the device type is not available in this build or on this machine.
Backend& backend_for(Device device);
Backend& backend_for(const Tensor& t);
bool cuda_is_available();
// Why CUDA is unavailable ("this build has no CUDA", "no CUDA device found"), or "".
std::string cuda_unavailable_reason();

// CPU thread count used by Kiln's loops and OpenBLAS.
void set_num_threads(int n);
int get_num_threads();
// OpenMP keeps its thread count per thread: a thread started by the program
// (a server's batcher, a data prefetcher) runs its parallel loops on
// OpenMP's default, not on set_num_threads's count, until it calls this.
void use_num_threads_on_this_thread();

}  // namespace kiln
