// Matrix products. Gradients are themselves matmuls whose transposes are
// views, so the backend folds them into GEMM flags instead of copying.
#include <tuple>
#include <utility>

#include "kiln/amp/autocast.h"
#include "kiln/autograd/ops.h"
#include "kiln/autograd/record.h"

namespace kiln {

namespace {

Tensor matmul_raw(const Tensor& a, const Tensor& b, const Tensor& bias = Tensor()) {
  detail::check_same_device(a, b, "matmul");
  detail::check_same_dtype(a, b, "matmul");
  KILN_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul needs operands of rank >= 2, got ", shape_str(a.shape()), " and ",
             shape_str(b.shape()), "; reshape vectors to [1, n] or [n, 1]");
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  KILN_CHECK(b.size(-2) == K, "matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
             " cannot be multiplied (", K, " != ", b.size(-2), ")");
  Shape batch_a(a.shape().begin(), a.shape().end() - 2), batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b);
  Shape sa = batch, sb = batch, so = batch;
  sa.insert(sa.end(), {M, K});
  sb.insert(sb.end(), {K, N});
  so.insert(so.end(), {M, N});
  Tensor out = detail::new_tensor(so, a.dtype(), a.device());
  MatmulArgs args;
  args.bias = bias;
  detail::backend_of(a).matmul(detail::broadcast_view(a, sa), detail::broadcast_view(b, sb), out, args);
  return out;
}

// A linear layer's weight gradient dY^T @ X [out, in] and, with `bias`, its
// bias's gradient (dY's column sums) from the same product: the GPU sums dY
// in the GEMM that already reads it (Backend::matmul_and_row_sums).
std::pair<Tensor, Tensor> weight_and_bias_grads(const Tensor& g2, const Tensor& input, bool bias) {
  if (!bias) return {matmul_raw(transpose(g2, 0, 1), input), Tensor()};
  detail::check_same_device(g2, input, "linear backward");
  detail::check_same_dtype(g2, input, "linear backward");
  Tensor dw = detail::new_tensor({g2.size(1), input.size(1)}, g2.dtype(), g2.device());
  Tensor db = detail::new_tensor({g2.size(1)}, g2.dtype(), g2.device());
  detail::backend_of(g2).matmul_and_row_sums(transpose(g2, 0, 1), input, dw, db);
  return {dw, db};
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  // Autocast: compute in the autocast dtype on casts of the inputs (kiln/amp/autocast.h).
  if (amp::autocast_should_lower({&a, &b})) return matmul(amp::autocast_lower(a), amp::autocast_lower(b));
  Tensor y = matmul_raw(a, b);
  record(y, "MatmulBackward", {&a, &b},
         [a = saved(a), b = saved(b), need_a = a.requires_grad(), need_b = b.requires_grad()](const Tensor& g) {
    Tensor ga = need_a ? sum_to(matmul_raw(g, transpose(b, -1, -2)), a.shape()) : Tensor();
    Tensor gb = need_b ? sum_to(matmul_raw(transpose(a, -1, -2), g), b.shape()) : Tensor();
    return std::vector<Tensor>{ga, gb};
  });
  return y;
}

namespace {

// linear's forward and node. With `recompute_x`, the node keeps that
// function (and what it captured) instead of x, and calls it in backward
// for the weight gradient: the same values, so the same gradients.
Tensor linear_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, std::function<Tensor()> recompute_x) {
  // Autocast: compute in the autocast dtype on casts of the inputs (kiln/amp/autocast.h).
  if (amp::autocast_should_lower({&x, &weight, &bias})) {
    if (recompute_x)  // recompute the lowered input: the same cast of the same values
      recompute_x = [f = std::move(recompute_x), dtype = *amp::autocast_dtype()] { return to_dtype(f(), dtype); };
    return linear_impl(amp::autocast_lower(x), amp::autocast_lower(weight), amp::autocast_lower(bias),
                       std::move(recompute_x));
  }
  KILN_CHECK(weight.dim() == 2, "linear: weight must be [out, in], got ", shape_str(weight.shape()));
  const int64_t in = weight.size(1), out = weight.size(0);
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == in, "linear: input ", shape_str(x.shape()), " does not end in ", in,
             " features");
  KILN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out), "linear: bias must be [", out, "]");
  const int64_t rows = x.numel() / std::max<int64_t>(in, 1);
  // Raw views keep the recorded graph to one node.
  Tensor x2 = x.is_contiguous() ? x.as_strided({rows, in}, {in, 1}, x.offset()) : contiguous(x).detach().as_strided({rows, in}, {in, 1}, 0);
  Tensor y2 = matmul_raw(x2, transpose(weight.detach(), 0, 1), bias.defined() ? contiguous(bias).detach() : Tensor());
  Shape ys = x.shape();
  ys.back() = out;
  Tensor y = y2.as_strided(ys, contiguous_strides(ys), 0);
  // A frozen weight (LoRA's base) needs no gradient, so its input is not kept.
  const bool need_w = weight.requires_grad();
  record(y, "LinearBackward", {&x, &weight, &bias},
         [x2 = recompute_x || !need_w ? Tensor() : saved(x2), recompute_x, w = saved(weight), need_w,
          has_bias = bias.defined() && bias.requires_grad(), need_x = x.requires_grad(), xs = x.shape(), rows, in,
          out](const Tensor& g) {
           Tensor g2 = reshape(g, {rows, out});
           Tensor dw, db;
           if (need_w) {  // the weight gradient first: a recomputed input is freed before dx exists
             Tensor input = x2;
             if (!input.defined()) {
               NoGradGuard values_only;
               input = reshape(contiguous(recompute_x()), {rows, in}).detach();
             }
             std::tie(dw, db) = weight_and_bias_grads(g2, input, has_bias);
           } else if (has_bias) {
             db = sum(g2, {0});
           }
           Tensor dx = need_x ? reshape(matmul_raw(g2, w), xs) : Tensor();
           return std::vector<Tensor>{dx, dw, db};
         });
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) { return linear_impl(x, weight, bias, {}); }

Tensor linear_recomputing_input(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                std::function<Tensor()> recompute_x) {
  KILN_CHECK(recompute_x, "linear_recomputing_input needs a function that recomputes x");
  return linear_impl(x, weight, bias, std::move(recompute_x));
}

Tensor linear_of_gelu(const Tensor& h, const Tensor& weight, const Tensor& bias, bool keep_gelu_output) {
  if (amp::autocast_should_lower({&h, &weight, &bias}))
    return linear_of_gelu(amp::autocast_lower(h), amp::autocast_lower(weight), amp::autocast_lower(bias),
                          keep_gelu_output);
  detail::check_same_dtype(h, weight, "linear_of_gelu");
  KILN_CHECK(weight.dim() == 2 && h.dim() >= 1 && h.size(-1) == weight.size(1), "linear_of_gelu: input ",
             shape_str(h.shape()), " does not fit weight ", shape_str(weight.shape()));
  const int64_t in = weight.size(1), out = weight.size(0);
  const int64_t rows = h.numel() / std::max<int64_t>(in, 1);
  Tensor h2 = reshape(contiguous(h), {rows, in}).detach();
  Tensor w = weight.detach(), b = bias.defined() ? contiguous(bias).detach() : Tensor();
  Tensor y2 = detail::new_tensor({rows, out}, h.dtype(), h.device());
  Tensor kept = keep_gelu_output ? detail::new_tensor({rows, in}, h.dtype(), h.device()) : Tensor();
  {
    // A quarter of gelu(h) at a time: as large as the block's residual
    // stream. Kept or not, the same chunked products, so both settings give
    // the same bits (a BLAS may round a chunk's rows unlike the whole's).
    NoGradGuard values_only;
    Backend& backend = detail::backend_of(h);
    const int64_t chunk = std::max<int64_t>(1, (rows + 3) / 4);
    for (int64_t first = 0; first < rows; first += chunk) {
      const int64_t last = std::min(rows, first + chunk);
      Tensor a = kept.defined() ? kept.slice(0, first, last)
                                : detail::new_tensor({last - first, in}, h.dtype(), h.device());
      backend.unary(UnaryOp::gelu, h2.slice(0, first, last), a);
      Tensor yc = y2.slice(0, first, last);
      MatmulArgs args;
      args.bias = b;
      backend.matmul(a, transpose(w, 0, 1), yc, args);
    }
  }
  Shape ys = h.shape();
  ys.back() = out;
  Tensor y = y2.as_strided(ys, contiguous_strides(ys), 0);
  record(y, "LinearOfGeluBackward", {&h, &weight, &bias},
         [h2, w, kept, has_bias = bias.defined(), need_h = h.requires_grad(), hs = h.shape(), rows,
          out](const Tensor& g) {
           Tensor g2 = reshape(g, {rows, out});
           Tensor dw, db;
           {  // a recomputed gelu(h) is freed before dh exists
             Tensor a = kept;
             if (!a.defined()) {
               a = detail::new_tensor(h2.shape(), h2.dtype(), h2.device());
               detail::backend_of(h2).unary(UnaryOp::gelu, h2, a);
             }
             std::tie(dw, db) = weight_and_bias_grads(g2, a, has_bias);
           }
           Tensor dh;
           if (need_h) {
             dh = matmul_raw(g2, w);
             detail::backend_of(dh).binary(BinaryOp::gelu_backward, dh, h2, dh);  // in place
             dh = reshape(dh, hs);
           }
           return std::vector<Tensor>{dh, dw, db};
         });
  return y;
}

}  // namespace kiln
