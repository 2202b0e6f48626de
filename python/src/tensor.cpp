// kiln.Tensor: Kiln's tensor as a Python object. numpy arrays come in without
// a copy (from_numpy) where their strides allow, and go out without one
// (numpy.asarray(t), memoryview(t)) while the tensor is on the CPU in a dtype
// numpy has.
#include <pybind11/numpy.h>
#include <pybind11/operators.h>

#include "kiln/autograd/ops.h"
#include "kiln/backend/factory.h"
#include "python/src/bindings.h"

namespace kiln::python {
namespace {

struct NumpyKind {
  char kind;
  size_t itemsize;
  DType dtype;
  const char* format;  // the buffer protocol's
};
constexpr NumpyKind kNumpyKinds[] = {
    {'f', 4, DType::f32, "f"}, {'f', 8, DType::f64, "d"}, {'f', 2, DType::f16, "e"},
    {'i', 4, DType::i32, "i"}, {'i', 8, DType::i64, "q"}, {'u', 1, DType::u8, "B"},
};

DType dtype_of_numpy(const py::dtype& d) {
  for (const auto& k : kNumpyKinds)
    if (d.kind() == k.kind && size_t(d.itemsize()) == k.itemsize) return k.dtype;
  throw py::type_error("numpy dtype " + py::str(d.attr("name")).cast<std::string>() + " has no Kiln dtype (Kiln has float32, float64, " +
                       "float16, bfloat16, int32, int64 and uint8): convert it first, e.g. a.astype(numpy.float32)");
}

const NumpyKind& numpy_kind_of(const Tensor& t) {
  for (const auto& k : kNumpyKinds)
    if (k.dtype == t.dtype()) return k;
  throw py::type_error(std::string("a ") + dtype_name(t.dtype()) + " tensor has no numpy dtype: convert it first, " +
                       "e.g. t.to(kiln.float32)");
}

void check_on_cpu(const Tensor& t, const char* what) {
  if (!t.device().is_cpu())
    throw py::type_error(std::string(what) + " needs a CPU tensor; this one is on " + t.device().str() +
                         ": copy it first with t.cpu()");
}

// A numpy array's memory as a tensor, the array kept alive by it. Strides that
// are whole, non-negative multiples of the item size stay as they are (a view);
// others cannot be a Kiln tensor without a copy.
Tensor from_numpy(const py::array& a) {
  const DType dtype = dtype_of_numpy(a.dtype());
  const auto itemsize = py::ssize_t(dtype_size(dtype));
  Shape shape(size_t(a.ndim())), strides(size_t(a.ndim()));
  int64_t span = 1;
  bool empty = false;
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    const py::ssize_t stride = a.strides(d);
    if (stride < 0 || stride % itemsize != 0)
      throw py::value_error("the numpy array's strides " + std::string(py::str(py::cast(std::vector<py::ssize_t>(
                                a.strides(), a.strides() + a.ndim())))) +
                            " are negative or not whole elements, which a Kiln tensor cannot share: pass "
                            "numpy.ascontiguousarray(a), or kiln.tensor(a), which copies");
    shape[size_t(d)] = a.shape(d);
    strides[size_t(d)] = stride / itemsize;
    empty |= a.shape(d) == 0;
    if (a.shape(d) > 0) span += (a.shape(d) - 1) * strides[size_t(d)];
  }
  if (empty) span = 0;
  auto* keep = new py::object(a);
  std::shared_ptr<void> owner(keep, [](py::object* o) {
    if (!Py_IsInitialized()) return;  // the interpreter is gone: so is the array
    py::gil_scoped_acquire gil;
    delete o;
  });
  Tensor flat = Tensor::wrap(const_cast<void*>(a.data()), {span}, dtype, std::move(owner));
  return a.ndim() == 1 && strides[0] == 1 ? flat : flat.as_strided(shape, strides, 0);
}

// The tensor's memory as a numpy array (no copy); the array keeps `self` alive.
py::array to_numpy(const py::object& self) {
  const Tensor& t = self.cast<const Tensor&>();
  check_on_cpu(t, "a numpy view");
  const auto& k = numpy_kind_of(t);
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(py::ssize_t(s * int64_t(k.itemsize)));
  return py::array(py::dtype(k.format), shape, strides, t.data_ptr(), self);
}

// The buffer protocol, with errors that reach Python (pybind11's own
// get_buffer cannot raise): memoryview(t), and numpy before __array__.
struct BufferShape {
  std::vector<py::ssize_t> shape, strides;
};

int get_buffer(PyObject* obj, Py_buffer* view, int flags) {
  try {
    const Tensor& t = py::handle(obj).cast<const Tensor&>();
    check_on_cpu(t, "the buffer protocol");
    const auto& k = numpy_kind_of(t);
    auto* dims = new BufferShape;
    for (int64_t d : t.shape()) dims->shape.push_back(py::ssize_t(d));
    for (int64_t s : t.strides()) dims->strides.push_back(py::ssize_t(s * int64_t(k.itemsize)));
    std::memset(view, 0, sizeof(Py_buffer));
    view->obj = obj;
    view->buf = t.data_ptr();
    view->itemsize = py::ssize_t(k.itemsize);
    view->len = py::ssize_t(t.nbytes());
    view->readonly = 0;
    view->ndim = t.dim();
    view->format = (flags & PyBUF_FORMAT) ? const_cast<char*>(k.format) : nullptr;
    view->shape = dims->shape.data();
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? dims->strides.data() : nullptr;
    if (!view->strides && !t.is_contiguous()) {
      delete dims;
      view->obj = nullptr;
      PyErr_SetString(PyExc_BufferError, "the tensor is not contiguous and the reader takes no strides: t.contiguous()");
      return -1;
    }
    view->internal = dims;
    Py_INCREF(obj);
    return 0;
  } catch (const std::exception& e) {
    view->obj = nullptr;
    PyErr_SetString(PyExc_BufferError, e.what());
    return -1;
  }
}

void release_buffer(PyObject*, Py_buffer* view) { delete static_cast<BufferShape*>(view->internal); }

Shape shape_of(const py::args& args) {
  // t.reshape(2, 3) and t.reshape((2, 3)) both, as PyTorch takes them.
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return args[0].cast<Shape>();
  return args.cast<Shape>();
}

Tensor scalar_like(double value, const Tensor& t) { return Tensor::scalar(value, t.dtype(), t.device()); }

}  // namespace

void bind_tensor(py::module_& m) {
  py::enum_<DType>(m, "dtype")
      .value("float32", DType::f32)
      .value("float64", DType::f64)
      .value("bfloat16", DType::bf16)
      .value("float16", DType::f16)
      .value("int32", DType::i32)
      .value("int64", DType::i64)
      .value("uint8", DType::u8)
      .def_property_readonly("is_floating_point", [](DType d) { return dtype_is_floating(d); })
      .def_property_readonly("itemsize", [](DType d) { return dtype_size(d); })
      .def("__repr__", [](DType d) { return "kiln." + py::str(py::cast(d).attr("name")).cast<std::string>(); })
      .def("__str__", [](DType d) { return "kiln." + py::str(py::cast(d).attr("name")).cast<std::string>(); });

  py::class_<Device>(m, "device")
      .def(py::init([](const std::string& s) { return Device::parse(s); }), py::arg("spec"))
      .def_property_readonly("type", [](const Device& d) { return d.is_cpu() ? "cpu" : d.is_cuda() ? "cuda" : "meta"; })
      .def_property_readonly("index", [](const Device& d) { return d.index; })
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) { return "device('" + d.str() + "')"; })
      .def("__eq__", [](const Device& a, const Device& b) { return a.type == b.type && a.index == b.index; }, py::is_operator())
      .def("__eq__", [](const Device& a, const std::string& b) { return a.str() == Device::parse(b).str(); }, py::is_operator())
      .def("__hash__", [](const Device& d) { return py::hash(py::str(d.str())); });
  py::implicitly_convertible<std::string, Device>();

  auto tensor = py::class_<Tensor>(m, "Tensor", py::buffer_protocol());
  auto* type = reinterpret_cast<PyTypeObject*>(tensor.ptr());
  type->tp_as_buffer->bf_getbuffer = get_buffer;
  type->tp_as_buffer->bf_releasebuffer = release_buffer;

  tensor.def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("device", &Tensor::device)
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("grad_fn", [](const Tensor& t) { return t.grad_fn() != nullptr; })
      .def_property("requires_grad", &Tensor::requires_grad,
                    [](Tensor& t, bool r) {
                      if (r && !dtype_is_floating(t.dtype()))
                        throw py::type_error(std::string("only floating-point tensors can require gradients; this one "
                                                         "is ") + dtype_name(t.dtype()));
                      t.set_requires_grad(r);
                    })
      .def_property(
          "grad", [](const Tensor& t) -> py::object { return t.grad().defined() ? py::cast(t.grad()) : py::none(); },
          [](Tensor& t, const py::object& g) { t.set_grad(g.is_none() ? Tensor() : g.cast<Tensor>()); })
      .def("size", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def("size", [](const Tensor& t, int64_t d) { return t.size(d); })
      .def("stride", [](const Tensor& t) { return py::tuple(py::cast(t.strides())); })
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("element_size", &Tensor::element_size)
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw py::type_error("len() of a 0-d tensor");
             return t.size(0);
           })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); })
      .def("__repr__",
           [](const Tensor& t) {
             return "kiln." + t.str() + (t.requires_grad() ? ", requires_grad=True" : "");
           })
      .def("item", &Tensor::item)
      .def("__float__", &Tensor::item)
      .def("__bool__", [](const Tensor& t) {
        if (t.numel() != 1) throw py::value_error("the truth value of a tensor of more than one element is ambiguous");
        return t.item() != 0;
      })
      .def("numpy", [](const py::object& self) { return to_numpy(self); })
      .def("__array__", [](const py::object& self, const py::object& dtype, const py::object& copy) {
        py::array view = to_numpy(self);
        if (!dtype.is_none()) return view.attr("astype")(dtype).cast<py::array>();
        return copy.is_none() || !copy.cast<bool>() ? view : view.attr("copy")().cast<py::array>();
      }, py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("tolist", [](const py::object& self) { return to_numpy(self).attr("tolist")(); })
      .def("backward",
           [](const Tensor& t, const std::optional<Tensor>& gradient, bool retain_graph) {
             py::gil_scoped_release release;
             t.backward(gradient.value_or(Tensor()), retain_graph);
           },
           py::arg("gradient") = py::none(), py::arg("retain_graph") = false)
      .def("requires_grad_", [](Tensor& t, bool r) -> Tensor& { return t.set_requires_grad(r); }, py::arg("requires_grad") = true)
      .def("detach", &Tensor::detach)
      .def("clone", &Tensor::clone)
      .def("contiguous", [](const Tensor& t) { return contiguous(t); })
      .def("copy_", [](Tensor& t, const Tensor& src) -> Tensor& {
        if (src.shape() != t.shape())
          throw py::value_error("copy_: the source's shape " + shape_str(src.shape()) + " is not the tensor's " +
                                shape_str(t.shape()));
        copy_into(src.dtype() == t.dtype() ? src : src.to(t.dtype()), t);
        return t;
      })
      .def("zero_", [](Tensor& t) -> Tensor& {
        copy_into(zeros(t.shape(), t.dtype(), t.device()), t);
        return t;
      })
      .def("to", [](const Tensor& t, DType d) { return to_dtype(t, d); })
      .def("to", [](const Tensor& t, const Device& d) { return to_device(t, d); })
      .def("cpu", [](const Tensor& t) { return to_device(t, Device::cpu()); })
      .def("cuda", [](const Tensor& t, int index) { return to_device(t, Device::cuda(index)); }, py::arg("index") = 0)
      .def("float", [](const Tensor& t) { return to_dtype(t, DType::f32); })
      .def("double", [](const Tensor& t) { return to_dtype(t, DType::f64); })
      .def("long", [](const Tensor& t) { return to_dtype(t, DType::i64); })
      .def("reshape", [](const Tensor& t, const py::args& a) { return reshape(t, shape_of(a)); })
      .def("view", [](const Tensor& t, const py::args& a) { return view(t, shape_of(a)); })
      .def("transpose", [](const Tensor& t, int64_t a, int64_t b) { return transpose(t, a, b); })
      .def("permute", [](const Tensor& t, const py::args& a) { return permute(t, shape_of(a)); })
      .def_property_readonly("T", [](const Tensor& t) {
        if (t.dim() != 2) throw py::value_error("t.T takes a 2-d tensor; use permute for others");
        return transpose(t, 0, 1);
      })
      .def("unsqueeze", [](const Tensor& t, int64_t d) { return unsqueeze(t, d); })
      .def("squeeze", [](const Tensor& t, int64_t d) { return squeeze(t, d); })
      .def("flatten", [](const Tensor& t, int64_t start) { return flatten(t, start); }, py::arg("start_dim") = 0)
      .def("expand", [](const Tensor& t, const py::args& a) { return expand(t, shape_of(a)); })
      .def("_slice", [](const Tensor& t, int64_t d, int64_t b, int64_t e, int64_t s) { return slice(t, d, b, e, s); })
      .def("sum", [](const Tensor& t, const std::optional<std::vector<int64_t>>& dim, bool keepdim) {
        return sum(t, dim.value_or(std::vector<int64_t>{}), keepdim);
      }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("mean", [](const Tensor& t, const std::optional<std::vector<int64_t>>& dim, bool keepdim) {
        return mean(t, dim.value_or(std::vector<int64_t>{}), keepdim);
      }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("amax", [](const Tensor& t, const std::vector<int64_t>& dim, bool keepdim) { return amax(t, dim, keepdim); },
           py::arg("dim"), py::arg("keepdim") = false)
      .def("argmax", [](const Tensor& t, int64_t dim) { return argmax(t, dim); }, py::arg("dim"))
      .def("exp", [](const Tensor& t) { return exp(t); })
      .def("log", [](const Tensor& t) { return log(t); })
      .def("sqrt", [](const Tensor& t) { return sqrt(t); })
      .def("tanh", [](const Tensor& t) { return tanh(t); })
      .def("sigmoid", [](const Tensor& t) { return sigmoid(t); })
      .def("relu", [](const Tensor& t) { return relu(t); })
      .def("softmax", [](const Tensor& t, int64_t dim) { return softmax(t, dim); }, py::arg("dim"))
      .def("log_softmax", [](const Tensor& t, int64_t dim) { return log_softmax(t, dim); }, py::arg("dim"))
      // Operators: tensors broadcast; Python numbers are scalars of the tensor's dtype.
      .def("__add__", [](const Tensor& a, const Tensor& b) { return add(a, b); }, py::is_operator())
      .def("__add__", [](const Tensor& a, double s) { return add_scalar(a, s); }, py::is_operator())
      .def("__radd__", [](const Tensor& a, double s) { return add_scalar(a, s); }, py::is_operator())
      .def("__sub__", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, py::is_operator())
      .def("__sub__", [](const Tensor& a, double s) { return add_scalar(a, -s); }, py::is_operator())
      .def("__rsub__", [](const Tensor& a, double s) { return add_scalar(neg(a), s); }, py::is_operator())
      .def("__mul__", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, py::is_operator())
      .def("__mul__", [](const Tensor& a, double s) { return mul_scalar(a, s); }, py::is_operator())
      .def("__rmul__", [](const Tensor& a, double s) { return mul_scalar(a, s); }, py::is_operator())
      .def("__truediv__", [](const Tensor& a, const Tensor& b) { return div(a, b); }, py::is_operator())
      .def("__truediv__", [](const Tensor& a, double s) { return div(a, scalar_like(s, a)); }, py::is_operator())
      .def("__rtruediv__", [](const Tensor& a, double s) { return div(scalar_like(s, a), a); }, py::is_operator())
      .def("__pow__", [](const Tensor& a, double e) { return pow_scalar(a, e); }, py::is_operator())
      .def("__neg__", [](const Tensor& a) { return neg(a); })
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, py::is_operator())
      .def("__eq__", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, py::is_operator())
      .def("__eq__", [](const Tensor& a, double s) { return eq(a, scalar_like(s, a)); }, py::is_operator())
      .def("__gt__", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, py::is_operator())
      .def("__gt__", [](const Tensor& a, double s) { return gt(a, scalar_like(s, a)); }, py::is_operator())
      .def("__lt__", [](const Tensor& a, const Tensor& b) { return gt(b, a); }, py::is_operator())
      .def("__lt__", [](const Tensor& a, double s) { return gt(scalar_like(s, a), a); }, py::is_operator())
      .def("__hash__", [](const py::object& self) { return py::hash(py::int_(reinterpret_cast<uintptr_t>(self.ptr()))); });

  m.def("from_numpy", &from_numpy, py::arg("array"),
        "the array's memory as a tensor, without a copy (writes show in both)");
  m.def("_copy_numpy", [](const py::array& a) {
    // kiln.tensor: a copy in the array's own layout made contiguous.
    return from_numpy(py::module_::import("numpy").attr("ascontiguousarray")(a)).clone();
  });
  m.def("zeros", [](const Shape& s, DType d, const Device& dev) { return zeros(s, d, dev); }, py::arg("shape"),
        py::arg("dtype") = DType::f32, py::arg("device") = Device::cpu());
  m.def("ones", [](const Shape& s, DType d, const Device& dev) { return ones(s, d, dev); }, py::arg("shape"),
        py::arg("dtype") = DType::f32, py::arg("device") = Device::cpu());
  m.def("full", [](const Shape& s, double v, DType d, const Device& dev) { return full(s, v, d, dev); },
        py::arg("shape"), py::arg("fill_value"), py::arg("dtype") = DType::f32, py::arg("device") = Device::cpu());
  m.def("arange", [](int64_t n, DType d, const Device& dev) { return arange(n, d, dev); }, py::arg("end"),
        py::arg("dtype") = DType::i64, py::arg("device") = Device::cpu());
}

}  // namespace kiln::python
