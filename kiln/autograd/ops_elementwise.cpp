// Elementwise ops and their backward rules.
#include "kiln/autograd/ops.h"
#include "kiln/autograd/record.h"
#include "kiln/amp/autocast.h"

namespace kiln {

using detail::backend_of;

namespace detail {
Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const int r = int(shape.size()), tr = t.dim();
  KILN_CHECK(tr <= r, "cannot broadcast ", shape_str(t.shape()), " to ", shape_str(shape));
  Strides st(r, 0);
  for (int i = 0; i < tr; ++i) {
    int d = r - tr + i;
    if (t.shape()[i] == shape[d]) st[d] = t.strides()[i];
    else KILN_CHECK(t.shape()[i] == 1, "cannot broadcast ", shape_str(t.shape()), " to ", shape_str(shape));
  }
  return t.as_strided(shape, st, t.offset());
}
}  // namespace detail

namespace {

Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  detail::check_same_device(a, b, name);
  detail::check_same_dtype(a, b, name);
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  Tensor out = detail::new_tensor(shape, a.dtype(), a.device());
  backend_of(a).binary(op, detail::broadcast_view(a, shape), detail::broadcast_view(b, shape), out);
  return out;
}

Tensor unary_raw(UnaryOp op, const Tensor& x, double s = 0.0) {
  Tensor out = detail::new_tensor(x.shape(), x.dtype(), x.device());
  backend_of(x).unary(op, x, out, s);
  return out;
}

// f32 plus bf16/f16 (autocast's residual stream plus a projection's output):
// the backend reads the narrow operand as it is (Backend::binary), the same
// sum as promoting it first without its f32 copy; its gradient is cast back.
Tensor add_narrow(const Tensor& wide, const Tensor& narrow) {
  detail::check_same_device(wide, narrow, "add");
  Shape shape = broadcast_shapes(wide.shape(), narrow.shape());
  Tensor y = detail::new_tensor(shape, wide.dtype(), wide.device());
  backend_of(wide).binary(BinaryOp::add, detail::broadcast_view(wide, shape), detail::broadcast_view(narrow, shape),
                          y);
  record(y, "AddBackward", {&wide, &narrow},
         [sw = wide.shape(), sn = narrow.shape(), dn = narrow.dtype()](const Tensor& g) {
           return std::vector<Tensor>{sum_to(g, sw), to_dtype(sum_to(g, sn), dn)};
         });
  return y;
}

bool is_narrow_beside_f32(const Tensor& narrow, const Tensor& wide) {
  return wide.dtype() == DType::f32 && (narrow.dtype() == DType::bf16 || narrow.dtype() == DType::f16);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  if (amp::needs_promotion(a, b)) {
    if (is_narrow_beside_f32(b, a)) return add_narrow(a, b);
    if (is_narrow_beside_f32(a, b)) return add_narrow(b, a);  // f32 addition commutes bit for bit
    // Other mixed float dtypes promote to the wider one, as in PyTorch (kiln/amp/autocast.h).
    return add(amp::promote(a, b), amp::promote(b, a));
  }
  Tensor y = binary_raw(BinaryOp::add, a, b, "add");
  record(y, "AddBackward", {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)};
  });
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  // Mixed float dtypes promote to the wider one, as in PyTorch (kiln/amp/autocast.h).
  if (amp::needs_promotion(a, b)) return sub(amp::promote(a, b), amp::promote(b, a));
  Tensor y = binary_raw(BinaryOp::sub, a, b, "sub");
  record(y, "SubBackward", {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(neg(g), sb)};
  });
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  // Mixed float dtypes promote to the wider one, as in PyTorch (kiln/amp/autocast.h).
  if (amp::needs_promotion(a, b)) return mul(amp::promote(a, b), amp::promote(b, a));
  Tensor y = binary_raw(BinaryOp::mul, a, b, "mul");
  record(y, "MulBackward", {&a, &b}, [a = saved(a), b = saved(b)](const Tensor& g) {
    return std::vector<Tensor>{sum_to(mul(g, b), a.shape()),
                               sum_to(mul(g, a), b.shape())};
  });
  return y;
}

Tensor div(const Tensor& a, const Tensor& b) {
  // Mixed float dtypes promote to the wider one, as in PyTorch (kiln/amp/autocast.h).
  if (amp::needs_promotion(a, b)) return div(amp::promote(a, b), amp::promote(b, a));
  Tensor y = binary_raw(BinaryOp::div, a, b, "div");
  record(y, "DivBackward", {&a, &b}, [a = saved(a), b = saved(b)](const Tensor& g) {
    Tensor ga = div(g, b);
    Tensor gb = neg(div(mul(ga, a), b));
    return std::vector<Tensor>{sum_to(ga, a.shape()), sum_to(gb, b.shape())};
  });
  return y;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  // Mixed float dtypes promote to the wider one, as in PyTorch (kiln/amp/autocast.h).
  if (amp::needs_promotion(a, b)) return maximum(amp::promote(a, b), amp::promote(b, a));
  Tensor y = binary_raw(BinaryOp::maximum, a, b, "maximum");
  record(y, "MaximumBackward", {&a, &b}, [a = saved(a), b = saved(b)](const Tensor& g) {
    // As PyTorch: the larger operand gets the gradient, a tie splits it in
    // half, and where either is NaN both get all of it.
    Tensor half_tie = mul_scalar(binary_raw(BinaryOp::eq, a, b, "maximum"), 0.5);
    Tensor wa = sub(add_scalar(neg(binary_raw(BinaryOp::lt, a, b, "maximum")), 1.0), half_tie);
    Tensor wb = sub(add_scalar(neg(binary_raw(BinaryOp::lt, b, a, "maximum")), 1.0), half_tie);
    return std::vector<Tensor>{sum_to(mul(g, wa), a.shape()), sum_to(mul(g, wb), b.shape())};
  });
  return y;
}

Tensor eq(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::eq, a, b, "eq"); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::gt, a, b, "gt"); }

Tensor add_scalar(const Tensor& x, double s) {
  Tensor y = unary_raw(UnaryOp::add_scalar, x, s);
  record(y, "AddScalarBackward", {&x}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return y;
}

Tensor mul_scalar(const Tensor& x, double s) {
  Tensor y = unary_raw(UnaryOp::mul_scalar, x, s);
  record(y, "MulScalarBackward", {&x}, [s](const Tensor& g) { return std::vector<Tensor>{mul_scalar(g, s)}; });
  return y;
}

Tensor pow_scalar(const Tensor& x, double e) {
  Tensor y = unary_raw(UnaryOp::pow_scalar, x, e);
  record(y, "PowBackward", {&x}, [x = saved(x), e](const Tensor& g) {
    return std::vector<Tensor>{mul(g, mul_scalar(pow_scalar(x, e - 1.0), e))};
  });
  return y;
}

Tensor neg(const Tensor& x) {
  Tensor y = unary_raw(UnaryOp::neg, x);
  record(y, "NegBackward", {&x}, [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; });
  return y;
}

Tensor exp(const Tensor& x) {
  Tensor y = unary_raw(UnaryOp::exp, x);
  record(y, "ExpBackward", {&x}, [y = saved(y)](const Tensor& g) { return std::vector<Tensor>{mul(g, y)}; });
  return y;
}

Tensor log(const Tensor& x) {
  Tensor y = unary_raw(UnaryOp::log, x);
  record(y, "LogBackward", {&x}, [x = saved(x)](const Tensor& g) { return std::vector<Tensor>{div(g, x)}; });
  return y;
}

Tensor sqrt(const Tensor& x) {
  Tensor y = unary_raw(UnaryOp::sqrt, x);
  record(y, "SqrtBackward", {&x}, [y = saved(y)](const Tensor& g) {
    return std::vector<Tensor>{div(mul_scalar(g, 0.5), y)};
  });
  return y;
}

Tensor square(const Tensor& x) {
  Tensor y = unary_raw(UnaryOp::square, x);
  record(y, "SquareBackward", {&x}, [x = saved(x)](const Tensor& g) {
    return std::vector<Tensor>{mul(g, mul_scalar(x, 2.0))};
  });
  return y;
}

namespace {
// Activations whose gradient is one fused backend op of (grad, saved value).
Tensor activation(UnaryOp op, BinaryOp backward_op, bool save_output, const char* name, const Tensor& x) {
  Tensor y = unary_raw(op, x);
  record(y, name, {&x}, [s = saved(save_output ? y : x), backward_op](const Tensor& g) {
    // In place when it can: GELU's gradient is 4x the width of the stream.
    Tensor dx = detail::sole_reference(g) ? g : detail::new_tensor(g.shape(), g.dtype(), g.device());
    backend_of(g).binary(backward_op, g, s, dx);
    return std::vector<Tensor>{dx};
  });
  return y;
}
}  // namespace

Tensor tanh(const Tensor& x) { return activation(UnaryOp::tanh, BinaryOp::tanh_backward, true, "TanhBackward", x); }
Tensor sigmoid(const Tensor& x) {
  return activation(UnaryOp::sigmoid, BinaryOp::sigmoid_backward, true, "SigmoidBackward", x);
}
Tensor relu(const Tensor& x) { return activation(UnaryOp::relu, BinaryOp::relu_backward, false, "ReluBackward", x); }
Tensor gelu(const Tensor& x) { return activation(UnaryOp::gelu, BinaryOp::gelu_backward, false, "GeluBackward", x); }
Tensor gelu_erf(const Tensor& x) {
  return activation(UnaryOp::gelu_erf, BinaryOp::gelu_erf_backward, false, "GeluErfBackward", x);
}

}  // namespace kiln
