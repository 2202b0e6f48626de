// Kiln's autograd ops as functions of kiln._C; kiln and kiln.nn.functional
// export them under PyTorch's names.
#include "kiln/autograd/ops.h"
#include "kiln/nn/init.h"
#include "python/src/bindings.h"

namespace kiln::python {

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void bind_ops(py::module_& m) {
  using T = const Tensor&;
  m.def("add", [](T a, T b) { return add(a, b); });
  m.def("sub", [](T a, T b) { return sub(a, b); });
  m.def("mul", [](T a, T b) { return mul(a, b); });
  m.def("div", [](T a, T b) { return div(a, b); });
  m.def("maximum", [](T a, T b) { return maximum(a, b); });
  m.def("matmul", [](T a, T b) {
    py::gil_scoped_release release;
    return matmul(a, b);
  });
  m.def("neg", [](T x) { return neg(x); });
  m.def("exp", [](T x) { return exp(x); });
  m.def("log", [](T x) { return log(x); });
  m.def("sqrt", [](T x) { return sqrt(x); });
  m.def("tanh", [](T x) { return tanh(x); });
  m.def("sigmoid", [](T x) { return sigmoid(x); });
  m.def("relu", [](T x) { return relu(x); });
  m.def("gelu", [](T x, const std::string& approximate) {
    if (approximate == "tanh") return gelu(x);
    if (approximate == "none") return gelu_erf(x);
    throw py::value_error("gelu's approximate is 'none' or 'tanh', got '" + approximate + "'");
  }, py::arg("input"), py::arg("approximate") = "none");
  m.def("square", [](T x) { return square(x); });
  m.def("pow", [](T x, double e) { return pow_scalar(x, e); });
  m.def("softmax", [](T x, int64_t dim) { return softmax(x, dim); }, py::arg("input"), py::arg("dim"));
  m.def("log_softmax", [](T x, int64_t dim) { return log_softmax(x, dim); }, py::arg("input"), py::arg("dim"));
  m.def("cross_entropy", [](T logits, T targets, int64_t ignore_index) {
    return cross_entropy(logits, targets, ignore_index);
  }, py::arg("input"), py::arg("target"), py::arg("ignore_index") = -100);
  m.def("layer_norm", [](T x, T w, T b, double eps) { return layer_norm(x, w, b, eps); }, py::arg("input"),
        py::arg("weight"), py::arg("bias"), py::arg("eps") = 1e-5);
  m.def("linear", [](T x, T w, const std::optional<Tensor>& b) { return linear(x, w, b.value_or(Tensor())); },
        py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());
  m.def("embedding", [](T ids, T w) { return embedding(w, ids); }, py::arg("input"), py::arg("weight"));
  m.def("conv2d", [](T x, T w, const std::optional<Tensor>& b, int64_t stride, int64_t padding) {
    py::gil_scoped_release release;
    return conv2d(x, w, b.value_or(Tensor()), stride, padding);
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0);
  m.def("max_pool2d", [](T x, int64_t kernel, int64_t stride) { return max_pool2d(x, kernel, stride); },
        py::arg("input"), py::arg("kernel_size"), py::arg("stride") = 0);
  m.def("dropout", [](T x, double p, bool training) {
    if (p < 0 || p > 1) throw py::value_error("dropout probability must be in [0, 1], got " + std::to_string(p));
    return training && p > 0 ? dropout(x, p, default_generator()) : x;
  }, py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true);
  m.def("scaled_dot_product_attention", [](T q, T k, T v, bool is_causal) {
    py::gil_scoped_release release;
    return scaled_dot_product_attention(q, k, v, is_causal);
  }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("is_causal") = false);
  m.def("cat", [](const std::vector<Tensor>& xs, int64_t dim) { return cat(xs, dim); }, py::arg("tensors"),
        py::arg("dim") = 0);
  m.def("sum", [](T x, const std::optional<std::vector<int64_t>>& dim, bool keepdim) {
    return sum(x, dim.value_or(std::vector<int64_t>{}), keepdim);
  }, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def("mean", [](T x, const std::optional<std::vector<int64_t>>& dim, bool keepdim) {
    return mean(x, dim.value_or(std::vector<int64_t>{}), keepdim);
  }, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def("argmax", [](T x, int64_t dim) { return argmax(x, dim); }, py::arg("input"), py::arg("dim"));

  m.def("manual_seed", [](uint64_t seed) { default_generator().set_state(seed, 0); }, py::arg("seed"));
  m.def("randn", [](const Shape& shape, bool requires_grad) {
    Tensor t = nn::normal_tensor(shape, 1.0, default_generator());
    if (requires_grad) t.set_requires_grad(true);
    return t;
  }, py::arg("shape"), py::arg("requires_grad") = false);
}

}  // namespace kiln::python
