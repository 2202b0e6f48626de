// Reductions and their backward rules (broadcast the gradient back).
#include <algorithm>

#include "kiln/autograd/ops.h"
#include "kiln/autograd/record.h"

namespace kiln {

namespace {

// Normalised, sorted, unique dims; empty means all. (Dims lists are Shapes:
// inline, so a decoding step's sums allocate nothing.)
Shape reduce_dims(const Tensor& x, const Shape& dims) {
  Shape out;
  if (dims.empty()) {
    for (int d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(normalize_dim(d, x.dim()));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Shape keepdim_shape(const Tensor& x, const Shape& dims) {
  Shape s = x.shape();
  for (int64_t d : dims) s[d] = 1;
  return s;
}

Shape dropped_shape(const Tensor& x, const Shape& dims) {
  Shape s;
  for (int d = 0; d < x.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) s.push_back(x.shape()[d]);
  return s;
}

Tensor reduce_raw(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim) {
  Shape keep = keepdim_shape(x, dims);
  Tensor out = detail::new_tensor(keep, x.dtype(), x.device());
  detail::backend_of(x).reduce(op, x, out);
  return keepdim ? out : out.as_strided(dropped_shape(x, dims), contiguous_strides(dropped_shape(x, dims)), 0);
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims_in, bool keepdim) {
  const Shape dims = reduce_dims(x, dims_in);
  Tensor y = reduce_raw(ReduceOp::sum, x, dims, keepdim);
  record(y, "SumBackward", {&x}, [xs = x.shape(), keep = keepdim_shape(x, dims)](const Tensor& g) {
    return std::vector<Tensor>{expand(reshape(g, keep), xs)};
  });
  return y;
}

Tensor mean(const Tensor& x, const Shape& dims_in, bool keepdim) {
  const Shape dims = reduce_dims(x, dims_in);
  Tensor y = reduce_raw(ReduceOp::mean, x, dims, keepdim);
  int64_t count = std::max<int64_t>(1, x.numel() / std::max<int64_t>(1, y.numel()));
  record(y, "MeanBackward", {&x}, [xs = x.shape(), keep = keepdim_shape(x, dims), count](const Tensor& g) {
    return std::vector<Tensor>{expand(reshape(mul_scalar(g, 1.0 / double(count)), keep), xs)};
  });
  return y;
}

Tensor amax(const Tensor& x, const Shape& dims_in, bool keepdim) {
  const Shape dims = reduce_dims(x, dims_in);
  Tensor y = reduce_raw(ReduceOp::max, x, dims, true);
  Tensor result = keepdim ? y : reshape(y, dropped_shape(x, dims));
  // Ties share the gradient equally, as in PyTorch's amax.
  record(result, "AmaxBackward", {&x}, [x = saved(x), y = saved(y), dims_in, keep = y.shape()](const Tensor& g) {
    Tensor mask = eq(x, y);
    Tensor count = sum(mask, dims_in, true);
    return std::vector<Tensor>{mul(div(mask, count), reshape(g, keep))};
  });
  return result;
}

Tensor argmax(const Tensor& x, int64_t dim) {
  int d = normalize_dim(dim, x.dim());
  Tensor out = detail::new_tensor(dropped_shape(x, {d}), DType::i64, x.device());
  detail::backend_of(x).argmax(x, d, out);
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int lead = x.dim() - int(shape.size());
  KILN_CHECK(lead >= 0, "sum_to: cannot reduce ", shape_str(x.shape()), " to ", shape_str(shape));
  std::vector<int64_t> dims;
  for (int d = 0; d < x.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && x.shape()[d] != 1)) dims.push_back(d);
  Tensor s = dims.empty() ? x : sum(x, dims, true);
  return reshape(s, shape);
}

}  // namespace kiln
