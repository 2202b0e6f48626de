// Neural-network ops. Each forward calls one fused backend op and saves what
// its fused backward needs (softmax output, layernorm mean/rstd, attention
// log-sum-exp), never a second copy of a large activation.
#include "kiln/autograd/ops.h"
#include "kiln/autograd/record.h"
#include "kiln/amp/autocast.h"

namespace kiln {

using detail::backend_of;
using detail::new_tensor;

namespace {

DType stats_dtype(const Tensor& x) { return x.dtype() == DType::f64 ? DType::f64 : DType::f32; }

// Moves `dim` last so the backend can work on contiguous rows.
Tensor softmax_impl(const Tensor& x_in, int64_t dim, bool log) {
  // Autocast: compute in f32 on casts of bf16/f16 inputs (kiln/amp/autocast.h).
  if (amp::autocast_should_upcast({&x_in})) return softmax_impl(amp::autocast_upcast(x_in), dim, log);
  int d = normalize_dim(dim, x_in.dim());
  if (d != x_in.dim() - 1) {
    Tensor moved = transpose(x_in, d, -1);
    return transpose(softmax_impl(moved, -1, log), d, -1);
  }
  Tensor x = contiguous(x_in);
  Tensor y = new_tensor(x.shape(), x.dtype(), x.device());
  backend_of(x).softmax(x, y, log);
  record(y, log ? "LogSoftmaxBackward" : "SoftmaxBackward", {&x}, [y = saved(y), log](const Tensor& g) {
    Tensor dx = new_tensor(y.shape(), y.dtype(), y.device());
    backend_of(y).softmax_backward(y, contiguous(g), dx, log);
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace

int64_t count_valid_targets(const Tensor& targets, int64_t ignore_index) {
  std::vector<int64_t> t = targets.to_vector<int64_t>();
  int64_t n = 0;
  for (int64_t v : t) n += v != ignore_index;
  return n;
}

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

namespace {

// dlogits already holds (softmax - onehot) / valid; backward scales it by the
// upstream scalar, in place when the node is used for the last time, so the
// logits' gradient is never held twice.
struct CrossEntropyNode final : GradNode {
  Tensor dlogits;
  Shape shape;
  const char* name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor scale = to_dtype(g, dlogits.dtype());
    if (!last_use) return {reshape(mul(dlogits, scale), shape)};
    backend_for(dlogits).binary(BinaryOp::mul, dlogits, detail::broadcast_view(scale, dlogits.shape()), dlogits);
    return {reshape(dlogits, shape)};
  }
  void release() override { dlogits = Tensor(); }
};

Tensor cross_entropy_impl(const Tensor& logits_in, const Tensor& targets_in, int64_t ignore_index, bool overwrite) {
  // Autocast: compute in f32 on casts of bf16/f16 inputs (kiln/amp/autocast.h).
  if (amp::autocast_should_upcast({&logits_in}))
    return cross_entropy_impl(amp::autocast_upcast(logits_in), targets_in, ignore_index, overwrite);
  // Exactly [..., C] against [...]: equal element counts alone would pair
  // logits [B, T, C] with targets [T, B] row by wrong row.
  KILN_CHECK(logits_in.dim() >= 1 &&
                 Shape(logits_in.shape().begin(), logits_in.shape().end() - 1) == targets_in.shape(),
             "cross_entropy: logits ", shape_str(logits_in.shape()), " and targets ", shape_str(targets_in.shape()),
             " do not match (expected logits [..., C] and targets [...] with the same leading dims)");
  KILN_CHECK(targets_in.dtype() == DType::i64 || targets_in.dtype() == DType::i32,
             "cross_entropy: targets must be i64 or i32 class indices, got ", dtype_name(targets_in.dtype()));
  const int64_t C = logits_in.size(-1), N = targets_in.numel();
  Tensor logits = reshape(contiguous(logits_in), {N, C}).detach();
  Tensor targets = reshape(contiguous(targets_in), {N}).detach();
  // On the meta device (planning) there are no targets to read: count all.
  const int64_t valid =
      targets.device().type == DeviceType::meta ? N : count_valid_targets(targets, ignore_index);
  KILN_CHECK(valid > 0, "cross_entropy: every target equals ignore_index (", ignore_index, ")");
  const bool needs_grad = any_requires_grad({&logits_in});
  Tensor losses = new_tensor({N}, logits.dtype() == DType::f64 ? DType::f64 : DType::f32, logits.device());
  // Overwriting: the gradient goes into the logits' own buffer (the backend
  // reads each row before it writes it), so the two never exist at once.
  const bool in_place = overwrite && logits.same_storage(logits_in);
  Tensor dlogits = needs_grad ? (in_place ? logits : new_tensor({N, C}, logits.dtype(), logits.device())) : Tensor();
  backend_of(logits).cross_entropy(logits, targets, losses, dlogits, float(1.0 / double(valid)), ignore_index);
  Tensor loss = mul_scalar(sum(losses), 1.0 / double(valid)).detach();
  if (any_requires_grad({&logits_in})) {
    auto node = std::make_shared<CrossEntropyNode>();
    node->dlogits = dlogits;
    node->shape = logits_in.shape();
    attach_node(loss, node, {&logits_in});
  }
  return loss;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  return cross_entropy_impl(logits, targets, ignore_index, false);
}

Tensor cross_entropy_overwriting_logits(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  return cross_entropy_impl(logits, targets, ignore_index, true);
}

namespace {

// y in `out_dtype`: x's own, or (lowered) the autocast dtype beside f32 x.
Tensor layer_norm_into(const Tensor& x_in, const Tensor& weight, const Tensor& bias, double eps, DType out_dtype) {
  const int64_t C = x_in.size(-1), N = x_in.numel() / std::max<int64_t>(C, 1);
  KILN_CHECK(weight.numel() == C && bias.numel() == C, "layer_norm: weight and bias must have ", C,
             " elements, got ", weight.numel(), " and ", bias.numel());
  Tensor x = reshape(contiguous(x_in), {N, C}).detach();
  Tensor y = new_tensor({N, C}, out_dtype, x.device());
  Tensor mean = new_tensor({N}, stats_dtype(x), x.device());
  Tensor rstd = new_tensor({N}, stats_dtype(x), x.device());
  backend_of(x).layernorm(x, contiguous(weight).detach(), contiguous(bias).detach(), float(eps), y, mean, rstd);
  Tensor out = y.as_strided(x_in.shape(), contiguous_strides(x_in.shape()), 0);
  record(out, "LayerNormBackward", {&x_in, &weight, &bias},
         [x, w = saved(weight), mean, rstd, shape = x_in.shape()](const Tensor& g) {
           // g is in y's dtype; the backend reads it beside f32 rows as it is.
           Tensor dx = new_tensor(x.shape(), x.dtype(), x.device());
           Tensor dw = new_tensor(w.shape(), w.dtype(), w.device());
           Tensor db = new_tensor(w.shape(), w.dtype(), w.device());
           Tensor g2 = reshape(contiguous(g), x.shape());
           backend_of(x).layernorm_backward(g2, x, contiguous(w), mean, rstd, dx, dw, db);
           return std::vector<Tensor>{reshape(dx, shape), dw, db};
         });
  return out;
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Tensor& weight, const Tensor& bias, double eps) {
  // Autocast: compute in f32 on casts of bf16/f16 inputs (kiln/amp/autocast.h).
  if (amp::autocast_should_upcast({&x_in, &weight, &bias}))
    return layer_norm(amp::autocast_upcast(x_in), amp::autocast_upcast(weight), amp::autocast_upcast(bias), eps);
  return layer_norm_into(x_in, weight, bias, eps, x_in.dtype());
}

Tensor layer_norm_for_matmul(const Tensor& x_in, const Tensor& weight, const Tensor& bias, double eps) {
  if (amp::autocast_should_upcast({&x_in, &weight, &bias}))
    return layer_norm_for_matmul(amp::autocast_upcast(x_in), amp::autocast_upcast(weight),
                                 amp::autocast_upcast(bias), eps);
  const std::optional<DType> lowered = amp::autocast_dtype();
  const bool lower = lowered && x_in.dtype() == DType::f32 && weight.dtype() == DType::f32;
  return layer_norm_into(x_in, weight, bias, eps, lower ? *lowered : x_in.dtype());
}

Tensor rms_norm(const Tensor& x_in, const Tensor& weight, double eps, bool plus_one) {
  const int64_t C = x_in.dim() > 0 ? x_in.size(-1) : 0, N = x_in.numel() / std::max<int64_t>(C, 1);
  KILN_CHECK(weight.numel() == C, "rms_norm: weight must have ", C, " elements, got ", weight.numel());
  detail::check_same_device(x_in, weight, "rms_norm");
  detail::check_same_dtype(x_in, weight, "rms_norm");
  Tensor x = reshape(contiguous(x_in), {N, C}).detach();
  Tensor y = new_tensor({N, C}, x.dtype(), x.device());
  Tensor rstd = new_tensor({N}, stats_dtype(x), x.device());
  backend_of(x).rms_norm(x, contiguous(weight).detach(), float(eps), plus_one, y, rstd);
  Tensor out = y.as_strided(x_in.shape(), contiguous_strides(x_in.shape()), 0);
  record(out, "RmsNormBackward", {&x_in, &weight},
         [x, w = saved(weight), rstd, plus_one, shape = x_in.shape()](const Tensor& g) {
           // In the compute dtype, from the saved rstd: normed = x * rstd,
           // gn = g * weight (1 + weight), dx = rstd * (gn - normed * mean(gn * normed)),
           // dweight = the rows' sum of g * normed.
           const DType compute = rstd.dtype();
           const Tensor r = unsqueeze(rstd, -1), normed = to_dtype(x, compute) * r;
           const Tensor g_rows = to_dtype(reshape(g, x.shape()), compute), w_compute = to_dtype(w, compute);
           const Tensor gn = g_rows * (plus_one ? add_scalar(w_compute, 1) : w_compute);
           const Tensor dx = r * (gn - normed * mean(gn * normed, {-1}, true));
           return std::vector<Tensor>{reshape(to_dtype(dx, x.dtype()), shape),
                                      to_dtype(sum(g_rows * normed, {0}), w.dtype())};
         });
  return out;
}

Tensor rotary(const Tensor& x_in, const Tensor& cos, const Tensor& sin) {
  KILN_CHECK(x_in.dim() >= 1 && cos.dim() >= 1 && cos.dim() <= x_in.dim() && sin.shape() == cos.shape(),
             "rotary: cos ", shape_str(cos.shape()), " and sin ", shape_str(sin.shape()),
             " must be one shape, broadcasting against x ", shape_str(x_in.shape()));
  KILN_CHECK(!cos.requires_grad() && !sin.requires_grad(), "rotary: cos and sin take no gradient; detach them");
  // Mixed float dtypes promote to the wider one, as the unfused products do (autocast's bf16 q against f32 tables).
  if (amp::needs_promotion(x_in, cos) || amp::needs_promotion(x_in, sin))
    return rotary(amp::promote(amp::promote(x_in, cos), sin), amp::promote(amp::promote(cos, x_in), sin),
                  amp::promote(amp::promote(sin, x_in), cos));
  detail::check_same_device(x_in, cos, "rotary");
  detail::check_same_dtype(x_in, cos, "rotary");
  detail::check_same_dtype(x_in, sin, "rotary");
  Shape tables = x_in.shape();
  tables.back() = cos.size(-1);
  const Tensor c = detail::broadcast_view(cos.detach(), tables), s = detail::broadcast_view(sin.detach(), tables);
  Tensor x = contiguous(x_in).detach();
  Tensor y = new_tensor(x.shape(), x.dtype(), x.device());
  backend_of(x).rotary(x, c, s, y);
  record(y, "RotaryBackward", {&x_in}, [c, s](const Tensor& g) {
    // y is linear in x; its transpose rotates by cos and by sin with its
    // halves swapped and negated.
    const int64_t R = s.size(-1);
    const Tensor back_sin = cat({neg(slice(s, -1, R / 2, R)), neg(slice(s, -1, 0, R / 2))}, -1);
    const Tensor gc = contiguous(g);
    Tensor dx = new_tensor(gc.shape(), gc.dtype(), gc.device());
    backend_of(gc).rotary(gc, c, back_sin, dx);
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor silu_mul(const Tensor& gate_in, const Tensor& up_in) {
  // Mixed dtypes: SiLU in the gate's dtype, then the promoting product, as the unfused ops go.
  if (gate_in.dtype() != up_in.dtype()) return gate_in * sigmoid(gate_in) * up_in;
  KILN_CHECK(gate_in.shape() == up_in.shape(), "silu_mul: gate ", shape_str(gate_in.shape()), " and up ",
             shape_str(up_in.shape()), " must be one shape");
  detail::check_same_device(gate_in, up_in, "silu_mul");
  const Tensor gate = contiguous(gate_in).detach(), up = contiguous(up_in).detach();
  Tensor out = new_tensor(gate.shape(), gate.dtype(), gate.device());
  backend_of(gate).silu_mul(gate, up, out);
  record(out, "SiluMulBackward", {&gate_in, &up_in}, [gate, up](const Tensor& g) {
    // d up = g silu(gate); d gate = g up silu'(gate), silu' = s + silu (1 - s).
    const Tensor s = sigmoid(gate), silu = gate * s;
    const Tensor slope = s + silu * add_scalar(neg(s), 1);
    return std::vector<Tensor>{g * up * slope, g * silu};
  });
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& ids_in, std::optional<int64_t> padding_idx) {
  KILN_CHECK(weight.dim() == 2, "embedding: weight must be [vocab, dim], got ", shape_str(weight.shape()));
  detail::check_same_device(weight, ids_in, "embedding");
  Tensor ids = contiguous(ids_in).detach();
  Shape s = ids.shape();
  s.push_back(weight.size(1));
  Tensor out = new_tensor(s, weight.dtype(), weight.device());
  backend_of(weight).embedding(contiguous(weight).detach(), ids, out);
  const Shape ws = weight.shape();
  const DType wd = weight.dtype();
  record(out, "EmbeddingBackward", {&weight}, [ids, ws, wd, padding_idx](const Tensor& g) {
    Tensor dw = zeros(ws, wd, g.device());
    backend_of(g).embedding_backward(contiguous(g), ids, dw);
    if (padding_idx) {
      Tensor row = slice(dw, 0, *padding_idx, *padding_idx + 1);
      copy_into(zeros({1, ws[1]}, wd, g.device()), row);
    }
    return std::vector<Tensor>{dw};
  });
  return out;
}

Tensor conv2d(const Tensor& x_in, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding) {
  // Autocast: compute in the autocast dtype on casts of the inputs (kiln/amp/autocast.h).
  if (amp::autocast_should_lower({&x_in, &weight, &bias}))
    return conv2d(amp::autocast_lower(x_in), amp::autocast_lower(weight), amp::autocast_lower(bias), stride, padding);
  KILN_CHECK(x_in.dim() == 4 && weight.dim() == 4, "conv2d: expected x [N, C, H, W] and weight [Cout, Cin, KH, KW], "
             "got ", shape_str(x_in.shape()), " and ", shape_str(weight.shape()));
  KILN_CHECK(x_in.size(1) == weight.size(1), "conv2d: input has ", x_in.size(1), " channels, weight expects ",
             weight.size(1));
  KILN_CHECK(stride > 0 && padding >= 0, "conv2d: stride must be > 0 and padding >= 0");
  Conv2dArgs args{stride, stride, padding, padding};
  const int64_t OH = (x_in.size(2) + 2 * padding - weight.size(2)) / stride + 1;
  const int64_t OW = (x_in.size(3) + 2 * padding - weight.size(3)) / stride + 1;
  KILN_CHECK(OH > 0 && OW > 0, "conv2d: kernel ", shape_str(weight.shape()), " is larger than the padded input ",
             shape_str(x_in.shape()));
  Tensor x = contiguous(x_in).detach();
  Tensor w = contiguous(weight).detach();
  Tensor b = bias.defined() ? contiguous(bias).detach() : Tensor();
  Tensor out = new_tensor({x.size(0), w.size(0), OH, OW}, x.dtype(), x.device());
  backend_of(x).conv2d(x, w, b, out, args);
  record(out, "Conv2dBackward", {&x_in, &weight, &bias},
         [x, w, has_bias = bias.defined(), need_x = x_in.requires_grad(), args](const Tensor& g) {
           Tensor dx = need_x ? new_tensor(x.shape(), x.dtype(), x.device()) : Tensor();
           Tensor dw = new_tensor(w.shape(), w.dtype(), w.device());
           Tensor db = has_bias ? new_tensor({w.size(0)}, w.dtype(), w.device()) : Tensor();
           backend_of(x).conv2d_backward(contiguous(g), x, w, dx, dw, db, args);
           return std::vector<Tensor>{dx, dw, db};
         });
  return out;
}

Tensor max_pool2d(const Tensor& x_in, int64_t kernel, int64_t stride) {
  if (stride <= 0) stride = kernel;
  KILN_CHECK(x_in.dim() == 4, "max_pool2d: expected [N, C, H, W], got ", shape_str(x_in.shape()));
  KILN_CHECK(kernel > 0 && x_in.size(2) >= kernel && x_in.size(3) >= kernel, "max_pool2d: kernel ", kernel,
             " does not fit input ", shape_str(x_in.shape()));
  Pool2dArgs args{kernel, kernel, stride, stride};
  Tensor x = contiguous(x_in).detach();
  Shape s = {x.size(0), x.size(1), (x.size(2) - kernel) / stride + 1, (x.size(3) - kernel) / stride + 1};
  Tensor out = new_tensor(s, x.dtype(), x.device());
  Tensor indices = new_tensor(s, DType::i32, x.device());
  backend_of(x).maxpool2d(x, out, indices, args);
  record(out, "MaxPool2dBackward", {&x_in}, [indices, xs = x.shape(), xd = x.dtype()](const Tensor& g) {
    Tensor dx = new_tensor(xs, xd, g.device());
    backend_of(g).maxpool2d_backward(contiguous(g), indices, dx);
    return std::vector<Tensor>{dx};
  });
  return out;
}

Tensor dropout(const Tensor& x, double p, Generator& gen) {
  KILN_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  if (p == 0.0) return x;
  Tensor mask = new_tensor(x.shape(), x.dtype(), x.device());
  backend_of(x).dropout_mask(mask, float(p), gen.seed(), gen.advance(uint64_t(x.numel())));
  Tensor y = mul(x.detach(), mask);
  record(y, "DropoutBackward", {&x}, [mask](const Tensor& g) { return std::vector<Tensor>{mul(g, mask)}; });
  return y;
}

namespace {

// An attention operand the backend reads as it is: any view whose rows (the
// last dim) are contiguous and do not overlap (an expanded T is copied).
Tensor rows_contiguous(const Tensor& t) {
  const bool rows = (t.size(-1) == 1 || t.strides().back() == 1) &&
                    (t.size(-2) == 1 || t.strides()[size_t(t.dim() - 2)] >= t.size(-1));
  return rows ? t.detach() : contiguous(t).detach();
}

// The attention of q, k, v (views into `kept`, which the node keeps) into a
// new [B, H, T, D]; backward writes dq, dk, dv into what `grad_views` makes
// (fresh tensors, or views of one packed gradient) and returns `grads()`.
struct AttentionViews {
  Tensor q, k, v;
};

Tensor attention_of_views(const AttentionViews& in, bool causal, Tensor out, std::initializer_list<const Tensor*> inputs,
                          std::function<std::vector<Tensor>(AttentionViews&)> grad_views) {
  const Tensor& q = in.q;
  const float scale = float(1.0 / std::sqrt(double(q.size(3))));
  Tensor lse = new_tensor({q.size(0), q.size(1), q.size(2)}, stats_dtype(q), q.device());
  backend_of(q).attention(in.q, in.k, in.v, out, lse, scale, causal);
  record(out, "AttentionBackward", inputs,
         [in, o = saved(out), lse, scale, causal, grad_views = std::move(grad_views)](const Tensor& g) {
           AttentionViews d;
           std::vector<Tensor> grads = grad_views(d);
           backend_of(in.q).attention_backward(rows_contiguous(g), in.q, in.k, in.v, o, lse, d.q, d.k, d.v, scale,
                                               causal);
           return grads;
         });
  return out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal) {
  // Autocast: compute in the autocast dtype on casts of the inputs (kiln/amp/autocast.h).
  if (amp::autocast_should_lower({&q_in, &k_in, &v_in}))
    return scaled_dot_product_attention(amp::autocast_lower(q_in), amp::autocast_lower(k_in), amp::autocast_lower(v_in),
                                        causal);
  KILN_CHECK(q_in.dim() == 4 && q_in.shape() == k_in.shape() && q_in.shape() == v_in.shape(),
             "attention: q, k, v must share one shape [B, H, T, D]; got ", shape_str(q_in.shape()), ", ",
             shape_str(k_in.shape()), ", ", shape_str(v_in.shape()));
  detail::check_same_dtype(q_in, k_in, "attention");
  detail::check_same_dtype(q_in, v_in, "attention");
  const AttentionViews in{rows_contiguous(q_in), rows_contiguous(k_in), rows_contiguous(v_in)};
  const Tensor out = new_tensor(in.q.shape(), in.q.dtype(), in.q.device());
  return attention_of_views(in, causal, out, {&q_in, &k_in, &v_in}, [q = in.q](AttentionViews& d) {
    d = {new_tensor(q.shape(), q.dtype(), q.device()), new_tensor(q.shape(), q.dtype(), q.device()),
         new_tensor(q.shape(), q.dtype(), q.device())};
    return std::vector<Tensor>{d.q, d.k, d.v};
  });
}

Tensor scaled_dot_product_attention_packed(const Tensor& qkv_in, int64_t n_head, bool causal) {
  if (amp::autocast_should_lower({&qkv_in}))
    return scaled_dot_product_attention_packed(amp::autocast_lower(qkv_in), n_head, causal);
  KILN_CHECK(n_head > 0 && qkv_in.dim() == 3 && qkv_in.size(2) % (3 * n_head) == 0,
             "attention: packed q|k|v must be [B, T, 3 * n_head * head_dim], got ", shape_str(qkv_in.shape()),
             " with n_head ", n_head);
  const int64_t B = qkv_in.size(0), T = qkv_in.size(1), C = qkv_in.size(2) / 3, H = n_head, D = C / H;
  // [B, T, 3, H, D] read as three [B, H, T, D] views.
  auto heads_of = [B, T, C, H, D](const Tensor& packed, int64_t part) {
    return packed.as_strided({B, H, T, D}, {T * 3 * C, D, 3 * C, 1}, packed.offset() + part * C);
  };
  const Tensor qkv = contiguous(qkv_in).detach();
  const AttentionViews in{heads_of(qkv, 0), heads_of(qkv, 1), heads_of(qkv, 2)};
  // The heads are written in [B, T, H, D] order (returned as a [B, H, T, D]
  // view), so merging them back into [B, T, C] is a view, not a copy.
  const Tensor out = new_tensor({B, T, H, D}, qkv.dtype(), qkv.device()).as_strided({B, H, T, D}, {T * C, D, C, 1}, 0);
  return attention_of_views(in, causal, out, {&qkv_in}, [qkv, heads_of](AttentionViews& d) {
    Tensor dqkv = new_tensor(qkv.shape(), qkv.dtype(), qkv.device());  // every element written by dq, dk, dv
    d = {heads_of(dqkv, 0), heads_of(dqkv, 1), heads_of(dqkv, 2)};
    return std::vector<Tensor>{dqkv};
  });
}

}  // namespace kiln
