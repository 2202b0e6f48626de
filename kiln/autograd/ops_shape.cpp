// Views and layout changes. Views share storage; their backward rules move
// the gradient back into the input's shape.
#include <numeric>

#include "kiln/autograd/ops.h"
#include "kiln/autograd/record.h"

namespace kiln {

namespace {

Shape infer_shape(const Shape& requested, int64_t numel) {
  Shape s = requested;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      KILN_CHECK(infer < 0, "reshape: only one dim may be -1 in ", shape_str(requested));
      infer = int(i);
    } else {
      KILN_CHECK(s[i] >= 0, "reshape: invalid dim ", s[i], " in ", shape_str(requested));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known > 0 && numel % known == 0, "reshape: cannot infer -1 in ", shape_str(requested), " for ",
               numel, " elements");
    s[infer] = numel / known;
  }
  KILN_CHECK(shape_numel(s) == numel, "reshape: shape ", shape_str(requested), " does not hold ", numel,
             " elements");
  return s;
}

Tensor reshape_backward_rule(Tensor& y, const Tensor& x, const char* name) {
  record(y, name, {&x}, [xs = x.shape()](const Tensor& g) { return std::vector<Tensor>{reshape(g, xs)}; });
  return y;
}

}  // namespace

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor y = detail::new_tensor(x.shape(), x.dtype(), x.device());
  detail::backend_of(x).copy(x, y);
  record(y, "ContiguousBackward", {&x}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return y;
}

Tensor view(const Tensor& x, const Shape& shape) {
  Shape s = infer_shape(shape, x.numel());
  KILN_CHECK(x.is_contiguous(), "view: tensor of shape ", shape_str(x.shape()), " with strides ",
             shape_str(x.strides()), " is not contiguous; use reshape(), which copies when it must");
  Tensor y = x.as_strided(s, contiguous_strides(s), x.offset());
  return reshape_backward_rule(y, x, "ViewBackward");
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  if (x.is_contiguous()) return view(x, shape);
  return view(contiguous(x), shape);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  KILN_CHECK(int(dims.size()) == x.dim(), "permute: ", dims.size(), " dims given for a tensor of rank ", x.dim());
  Shape s(x.dim());
  Strides st(x.dim());
  Shape inverse(x.dim(), -1);  // (a list of dims: kept inline, as a shape is)
  for (int i = 0; i < x.dim(); ++i) {
    int d = normalize_dim(dims[i], x.dim());
    KILN_CHECK(inverse[d] < 0, "permute: dim ", d, " repeated");
    inverse[d] = i;
    s[i] = x.shape()[d];
    st[i] = x.strides()[d];
  }
  Tensor y = x.as_strided(s, st, x.offset());
  record(y, "PermuteBackward", {&x}, [inverse](const Tensor& g) { return std::vector<Tensor>{permute(g, inverse)}; });
  return y;
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  const int a = normalize_dim(d0, x.dim()), b = normalize_dim(d1, x.dim());
  Shape s = x.shape();
  Strides st = x.strides();
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  Tensor y = x.as_strided(s, st, x.offset());
  record(y, "TransposeBackward", {&x}, [a, b](const Tensor& g) { return std::vector<Tensor>{transpose(g, a, b)}; });
  return y;
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  int d = normalize_dim(dim, x.dim());
  const int64_t n = x.shape()[d];
  KILN_CHECK(step > 0, "slice: step must be positive, got ", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = x.shape();
  Strides st = x.strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor y = x.as_strided(s, st, x.offset() + start * x.strides()[d]);
  record(y, "SliceBackward", {&x}, [xs = x.shape(), d, start, end, step](const Tensor& g) {
    Tensor dx = zeros(xs, g.dtype(), g.device());
    Tensor window = slice(dx, d, start, end, step);
    copy_into(g, window);
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  Shape s = shape;
  const int lead = int(s.size()) - x.dim();
  KILN_CHECK(lead >= 0, "expand: cannot expand ", shape_str(x.shape()), " to ", shape_str(shape));
  for (int i = 0; i < x.dim(); ++i)
    if (s[lead + i] == -1) s[lead + i] = x.shape()[i];
  Tensor y = detail::broadcast_view(x, s);
  record(y, "ExpandBackward", {&x}, [xs = x.shape()](const Tensor& g) { return std::vector<Tensor>{sum_to(g, xs)}; });
  return y;
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  int d = normalize_dim(dim, x.dim() + 1);
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t inner = d < x.dim() ? x.strides()[d] * x.shape()[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, inner);
  Tensor y = x.as_strided(s, st, x.offset());
  return reshape_backward_rule(y, x, "UnsqueezeBackward");
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  int d = normalize_dim(dim, x.dim());
  if (x.shape()[d] != 1) return x;
  Shape s = x.shape();
  Strides st = x.strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Tensor y = x.as_strided(s, st, x.offset());
  return reshape_backward_rule(y, x, "SqueezeBackward");
}

Tensor flatten(const Tensor& x, int64_t start_dim) {
  int d = normalize_dim(start_dim, x.dim());
  Shape s(x.shape().begin(), x.shape().begin() + d);
  s.push_back(-1);
  return reshape(x, s);
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  KILN_CHECK(!xs.empty(), "cat: no tensors given");
  int d = normalize_dim(dim, xs[0].dim());
  Shape s = xs[0].shape();
  s[d] = 0;
  for (const Tensor& t : xs) {
    KILN_CHECK(t.dim() == xs[0].dim(), "cat: tensors differ in rank");
    for (int i = 0; i < t.dim(); ++i)
      KILN_CHECK(i == d || t.shape()[i] == xs[0].shape()[i], "cat: shapes ", shape_str(t.shape()), " and ",
                 shape_str(xs[0].shape()), " differ outside dim ", d);
    detail::check_same_device(t, xs[0], "cat");
    detail::check_same_dtype(t, xs[0], "cat");
    s[d] += t.shape()[d];
  }
  Tensor y = detail::new_tensor(s, xs[0].dtype(), xs[0].device());
  int64_t at = 0;
  for (const Tensor& t : xs) {
    Tensor window = y.as_strided(t.shape(), y.strides(), at * y.strides()[d]);
    copy_into(t, window);
    at += t.shape()[d];
  }
  bool needs_grad = grad_enabled() && std::any_of(xs.begin(), xs.end(), [](const Tensor& t) { return t.requires_grad(); });
  if (needs_grad) {
    std::vector<int64_t> sizes;
    for (const Tensor& t : xs) sizes.push_back(t.shape()[d]);
    auto node = std::make_shared<LambdaNode>("CatBackward", [d, sizes](const Tensor& g) {
      std::vector<Tensor> grads;
      int64_t begin = 0;
      for (int64_t n : sizes) {
        grads.push_back(slice(g, d, begin, begin + n));
        begin += n;
      }
      return grads;
    });
    for (const Tensor& t : xs) node->next.push_back(gradient_edge(t));
    y.impl().grad_fn = node;
    y.impl().requires_grad = true;
  }
  return y;
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor y = copy_to(x, x.device(), dtype);
  if (dtype_is_floating(dtype))
    record(y, "ToDtypeBackward", {&x}, [from = x.dtype()](const Tensor& g) {
      return std::vector<Tensor>{to_dtype(g, from)};
    });
  return y;
}

Tensor to_device(const Tensor& x, Device device) {
  if (x.device() == device) return x;
  Tensor y = copy_to(x, device, x.dtype());
  record(y, "ToDeviceBackward", {&x}, [from = x.device()](const Tensor& g) {
    return std::vector<Tensor>{to_device(g, from)};
  });
  return y;
}

}  // namespace kiln
