// cross_entropy(linear(x, weight), targets) in row chunks, with the
// gradients formed during forward (see ops.h). The mean loss is linear in
// each row's loss, so a chunk's logits can become its gradient at once and
// be multiplied into dx and dweight; backward scales those by the incoming
// gradient (1, a micro-batch's share, or the fp16 loss scale).
#include <algorithm>

#include "kiln/amp/autocast.h"
#include "kiln/autograd/ops.h"
#include "kiln/autograd/record.h"

namespace kiln {

using detail::backend_of;
using detail::new_tensor;

namespace {

// Rows per chunk: a chunk's logits no larger than x itself, and at least the
// rows the device's GEMMs need to run at speed (256 on a CPU, 2048 on a GPU).
int64_t chunk_rows(int64_t N, int64_t C, int64_t V, int64_t min_rows) {
  return std::min(std::max<int64_t>(N, 1), std::max<int64_t>(min_rows, N * C / std::max<int64_t>(V, 1)));
}

bool is_low_precision(const Tensor& t) { return t.dtype() == DType::bf16 || t.dtype() == DType::f16; }

// Holds dx and dweight; scales them in place when used for the last time.
struct LinearCrossEntropyNode final : GradNode {
  Tensor dx, dw;
  Shape x_shape;
  const char* name() const override { return "LinearCrossEntropyBackward"; }
  Tensor scaled(const Tensor& t, const Tensor& g) const {
    if (!t.defined()) return t;
    Tensor scale = to_dtype(g, t.dtype());
    if (!last_use) return mul(t, scale);
    Tensor out = t;
    backend_for(t).binary(BinaryOp::mul, t, detail::broadcast_view(scale, t.shape()), out);
    return out;
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gx = scaled(dx, g);
    return {gx.defined() ? reshape(gx, x_shape) : gx, scaled(dw, g)};
  }
  void release() override { dx = dw = Tensor(); }
};

// products: the dtype of the three matrix products' operands (f32, or bf16
// with f32 results); logits, losses and gradients are x's dtype.
Tensor linear_cross_entropy_in(const Tensor& x_in, const Tensor& weight_in, const Tensor& targets_in,
                               int64_t ignore_index, DType products);

}  // namespace

Tensor linear_cross_entropy(const Tensor& x_in, const Tensor& weight_in, const Tensor& targets_in,
                            int64_t ignore_index) {
  const bool lowered = is_low_precision(x_in) || is_low_precision(weight_in);
  const bool bf16_autocast =
      amp::autocast_dtype() == DType::bf16 && x_in.dtype() == DType::f32 && weight_in.dtype() == DType::f32;
  if (!lowered && !bf16_autocast)
    return linear_cross_entropy_in(x_in, weight_in, targets_in, ignore_index, x_in.dtype());
  // Under autocast the logits, losses and gradients stay f32: the gradient is
  // formed here, before the fp16 loss scale is applied, and would underflow
  // in f16. Under bf16 (f32's range), where the backend multiplies bf16 into
  // f32 faster, the products still take bf16 operands, as autocast's other
  // products do, rounding the logits' gradient to bf16 as PyTorch's autocast
  // does.
  const bool bf16 = x_in.dtype() != DType::f16 && weight_in.dtype() != DType::f16 &&
                    backend_of(x_in).fast_bf16_to_f32_matmul();
  return linear_cross_entropy_in(to_dtype(x_in, DType::f32), to_dtype(weight_in, DType::f32), targets_in,
                                 ignore_index, bf16 ? DType::bf16 : DType::f32);
}

namespace {

Tensor linear_cross_entropy_in(const Tensor& x_in, const Tensor& weight_in, const Tensor& targets_in,
                               int64_t ignore_index, DType products) {
  detail::check_same_device(x_in, weight_in, "linear_cross_entropy");
  detail::check_same_dtype(x_in, weight_in, "linear_cross_entropy");
  KILN_CHECK(weight_in.dim() == 2, "linear_cross_entropy: weight must be [vocab, features], got ",
             shape_str(weight_in.shape()));
  const int64_t V = weight_in.size(0), C = weight_in.size(1);
  KILN_CHECK(x_in.dim() >= 1 && x_in.size(-1) == C &&
                 Shape(x_in.shape().begin(), x_in.shape().end() - 1) == targets_in.shape(),
             "linear_cross_entropy: x ", shape_str(x_in.shape()), ", weight ", shape_str(weight_in.shape()),
             " and targets ", shape_str(targets_in.shape()), " do not match (expected x [..., ", C,
             "] and targets [...] with x's leading dims)");
  KILN_CHECK(targets_in.dtype() == DType::i64 || targets_in.dtype() == DType::i32,
             "linear_cross_entropy: targets must be i64 or i32 class indices, got ", dtype_name(targets_in.dtype()));
  const int64_t N = targets_in.numel();
  Tensor x = reshape(contiguous(x_in), {N, C}).detach();
  Tensor w = contiguous(weight_in).detach();
  Tensor targets = reshape(contiguous(targets_in), {N}).detach();
  const int64_t valid =  // on the meta device (planning) there are no targets to read: count all
      targets.device().type == DeviceType::meta ? N : count_valid_targets(targets, ignore_index);
  KILN_CHECK(valid > 0, "linear_cross_entropy: every target equals ignore_index (", ignore_index, ")");
  const bool need_x = any_requires_grad({&x_in}), need_w = any_requires_grad({&weight_in});
  Tensor losses = new_tensor({N}, x.dtype(), x.device());
  Tensor dx = need_x ? new_tensor({N, C}, x.dtype(), x.device()) : Tensor();
  Tensor dw;
  if (need_w) {  // a weight's gradient, formed early: booked as one
    MemoryCategoryScope scope(MemoryCategory::grads);
    dw = new_tensor({V, C}, w.dtype(), w.device());
  }
  {
    NoGradGuard values_only;
    Backend& backend = backend_of(x);
    const bool narrow = products != x.dtype();
    const Tensor xp = narrow ? to_dtype(x, products) : x, wp = narrow ? to_dtype(w, products) : w;
    const Tensor wt = transpose(wp, 0, 1);
    const int64_t rows = chunk_rows(N, C, V, backend.efficient_gemm_rows());
    for (int64_t first = 0; first < N; first += rows) {
      const int64_t last = std::min(N, first + rows);
      const Tensor xc = xp.slice(0, first, last);
      Tensor logits = new_tensor({last - first, V}, x.dtype(), x.device());
      backend.matmul(xc, wt, logits, {});
      Tensor chunk_losses = losses.slice(0, first, last);
      // In place (the backend reads a row before writing it), or written
      // straight in the products' narrower dtype: no second pass to cast it.
      Tensor dlogits;
      if (need_x || need_w) dlogits = narrow ? new_tensor(logits.shape(), products, x.device()) : logits;
      backend.cross_entropy(logits, targets.slice(0, first, last), chunk_losses, dlogits, float(1.0 / double(valid)),
                            ignore_index);
      if (need_x) {
        Tensor dxc = dx.slice(0, first, last);
        backend.matmul(dlogits, wp, dxc, {});
      }
      if (need_w) {
        MatmulArgs accumulate;
        accumulate.beta = first == 0 ? 0.0f : 1.0f;
        backend.matmul(transpose(dlogits, 0, 1), xc, dw, accumulate);
      }
    }
  }
  Tensor loss = mul_scalar(sum(losses), 1.0 / double(valid)).detach();
  if (need_x || need_w) {
    auto node = std::make_shared<LinearCrossEntropyNode>();
    node->dx = dx;
    node->dw = dw;
    node->x_shape = x_in.shape();
    attach_node(loss, node, {&x_in, &weight_in});
  }
  return loss;
}

}  // namespace

}  // namespace kiln
