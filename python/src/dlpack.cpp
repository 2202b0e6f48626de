// DLPack, the array-exchange protocol of PyTorch, numpy and JAX: t.__dlpack__()
// hands a tensor's memory to another library, and from_dlpack takes one's in,
// neither copying. torch.from_dlpack(kiln_tensor) and
// kiln.from_dlpack(torch_tensor) both work.
#include <dlpack/dlpack.h>

#include "python/src/bindings.h"

namespace kiln::python {
namespace {

struct DtypeCode {
  DType dtype;
  uint8_t code, bits;
};
constexpr DtypeCode kDtypeCodes[] = {
    {DType::f32, kDLFloat, 32}, {DType::f64, kDLFloat, 64}, {DType::f16, kDLFloat, 16}, {DType::bf16, kDLBfloat, 16},
    {DType::i32, kDLInt, 32},   {DType::i64, kDLInt, 64},   {DType::u8, kDLUInt, 8},
};

// What a DLManagedTensor handed out keeps alive: the tensor (so its storage)
// and the shape and strides the struct points at.
struct Exported {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

DLDevice dl_device(const Device& d) {
  if (d.is_cpu()) return {kDLCPU, 0};
  if (d.is_cuda()) return {kDLCUDA, d.index};
  throw py::value_error("a tensor on " + d.str() + " has no memory to share over DLPack");
}

void delete_unconsumed(PyObject* capsule) {
  // A capsule nobody consumed still owns its tensor; a consumer renames it.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    m->deleter(m);
  }
}

py::capsule to_dlpack(const Tensor& t) {
  auto* e = new Exported{t, t.shape(), t.strides(), {}};
  DLTensor& dl = e->managed.dl_tensor;
  dl.data = t.storage()->data;
  dl.byte_offset = uint64_t(t.offset()) * t.element_size();
  dl.device = dl_device(t.device());
  dl.ndim = t.dim();
  dl.shape = e->shape.data();
  dl.strides = e->strides.data();
  dl.dtype = {0, 0, 1};
  for (const auto& c : kDtypeCodes)
    if (c.dtype == t.dtype()) dl.dtype = {c.code, c.bits, 1};
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<Exported*>(m->manager_ctx); };
  return py::capsule(&e->managed, "dltensor", &delete_unconsumed);
}

DType dtype_of(const DLDataType& t) {
  if (t.lanes == 1)
    for (const auto& c : kDtypeCodes)
      if (c.code == t.code && c.bits == t.bits) return c.dtype;
  throw py::type_error("DLPack dtype (code " + std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits, " +
                       std::to_string(t.lanes) + " lanes) has no Kiln dtype");
}

// Takes the managed tensor out of `capsule` (renamed "used_dltensor", as the
// protocol asks) and wraps its memory; the producer's deleter runs when the
// last tensor sharing it goes.
Tensor from_capsule(const py::capsule& capsule) {
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    throw py::value_error("from_dlpack takes an object with __dlpack__ or an unused \"dltensor\" capsule");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  std::shared_ptr<void> owner(m, [](DLManagedTensor* managed) {
    if (!managed->deleter || !Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;  // numpy's deleter releases a Python object
    managed->deleter(managed);
  });
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  const DLTensor& dl = m->dl_tensor;
  if (dl.device.device_type != kDLCPU)
    throw py::value_error("from_dlpack: Kiln takes CPU memory over DLPack so far (this is device type " +
                          std::to_string(dl.device.device_type) + "): move it to the CPU first");
  const DType dtype = dtype_of(dl.dtype);
  Shape shape(dl.shape, dl.shape + dl.ndim);
  Strides strides = dl.strides ? Strides(dl.strides, dl.strides + dl.ndim) : contiguous_strides(shape);
  int64_t span = 1;
  for (int i = 0; i < dl.ndim; ++i) {
    if (strides[size_t(i)] < 0)
      throw py::value_error("from_dlpack: negative strides cannot be shared; make the tensor contiguous first");
    if (shape[size_t(i)] > 0) span += (shape[size_t(i)] - 1) * strides[size_t(i)];
  }
  if (shape_numel(shape) == 0) span = 0;
  char* data = static_cast<char*>(dl.data) + dl.byte_offset;
  return Tensor::wrap(data, {span}, dtype, std::move(owner)).as_strided(shape, strides, 0);
}

}  // namespace

void bind_dlpack(py::module_& m) {
  auto tensor = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  tensor.def("__dlpack__", [](const Tensor& t, const py::object& stream) { return to_dlpack(t); },
             py::arg("stream") = py::none());
  tensor.def("__dlpack_device__", [](const Tensor& t) {
    const DLDevice d = dl_device(t.device());
    return py::make_tuple(int(d.device_type), d.device_id);
  });
  m.def("from_dlpack", [](const py::object& source) {
    if (py::hasattr(source, "__dlpack__")) return from_capsule(source.attr("__dlpack__")());
    return from_capsule(source.cast<py::capsule>());
  }, py::arg("source"), "another library's tensor (torch, numpy, ...) as a Kiln tensor, sharing its memory");
}

}  // namespace kiln::python
