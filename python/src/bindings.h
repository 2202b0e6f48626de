// Kiln's Python extension, kiln._C: one bind_* function per part of the API.
// The Python package (python/kiln) builds PyTorch-shaped modules on top.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "kiln/core/random.h"
#include "kiln/core/tensor.h"

// Shapes go to and from Python as lists (and take any sequence), as the
// std::vector<int64_t> they once were did.
namespace pybind11::detail {
template <>
struct type_caster<kiln::Shape> : list_caster<kiln::Shape, int64_t> {};
}  // namespace pybind11::detail

namespace kiln::python {

namespace py = pybind11;

void bind_tensor(py::module_& m);  // kiln.Tensor, dtypes, devices, numpy
void bind_dlpack(py::module_& m);  // __dlpack__ and from_dlpack
void bind_ops(py::module_& m);     // the autograd ops as functions
void bind_nn(py::module_& m);      // C++ layers, optimizers, grad mode
void bind_data(py::module_& m);    // Fashion-MNIST and its loader
void bind_api(py::module_& m);     // train, plan, load: the command's work from Python

// The generator layers and random tensors draw from when given none
// (kiln.manual_seed resets it, as torch.manual_seed does).
Generator& default_generator();

}  // namespace kiln::python
