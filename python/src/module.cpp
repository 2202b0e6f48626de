// kiln._C, the extension module behind `import kiln`.
#include "kiln/core/error.h"
#include "python/src/bindings.h"

PYBIND11_MODULE(_C, m) {
  namespace py = pybind11;
  using namespace kiln::python;
  m.doc() = "Kiln's C++ engine; use it through the kiln package";
  // Kiln's errors keep their messages; they are RuntimeErrors, as PyTorch's are.
  py::register_exception<kiln::Error>(m, "KilnError", PyExc_RuntimeError);
  bind_tensor(m);
  bind_dlpack(m);
  bind_ops(m);
  bind_nn(m);
  bind_data(m);
  bind_api(m);
}
