// Debian's Fashion-MNIST and the loader the image recipes train from, so a
// Python loop sees exactly the batches `kiln train fashion-mlp` sees.
#include "kiln/data/fashion_mnist.h"
#include "kiln/data/loader.h"
#include "kiln/data/splits.h"
#include "python/src/bindings.h"

namespace kiln::python {

void bind_data(py::module_& m) {
  py::class_<data::ImageDataset>(m, "ImageDataset")
      .def_readonly("images", &data::ImageDataset::images)
      .def_readonly("labels", &data::ImageDataset::labels)
      .def_readonly("num_classes", &data::ImageDataset::num_classes)
      .def("__len__", &data::ImageDataset::size);
  m.def("load_fashion_mnist", [](const std::string& part, const std::string& dir) {
    if (part != "train" && part != "test") throw py::value_error("part is 'train' or 'test', got '" + part + "'");
    py::gil_scoped_release release;
    return data::load_fashion_mnist(part == "train" ? data::FashionMnistPart::train : data::FashionMnistPart::test, dir);
  }, py::arg("part") = "train", py::arg("dir") = "");
  m.def("fashion_mnist_classes", [] {
    const auto& names = data::fashion_mnist_class_names();
    return std::vector<std::string>(names.begin(), names.end());
  });
  m.def("split_indices", [](int64_t n, int64_t n_validation) {
    data::Split s = data::split_indices(n, n_validation);
    return py::make_tuple(s.train, s.validation);
  }, py::arg("n"), py::arg("n_validation"));
  m.attr("FASHION_MNIST_VALIDATION_SIZE") = data::kFashionMnistValidationSize;

  py::class_<data::ImageLoader>(m, "ImageLoader")
      .def(py::init([](const data::ImageDataset& ds, std::vector<int64_t> indices, int64_t batch_size, bool shuffle,
                       bool drop_last, uint64_t seed) {
             if (batch_size <= 0) throw py::value_error("batch_size must be positive");
             data::ImageLoaderOptions o;
             o.batch_size = batch_size, o.shuffle = shuffle, o.drop_last = drop_last, o.seed = seed;
             return std::make_unique<data::ImageLoader>(ds, std::move(indices), o);
           }),
           py::arg("dataset"), py::arg("indices"), py::arg("batch_size") = 64, py::arg("shuffle") = true,
           py::arg("drop_last") = false, py::arg("seed") = 0, py::keep_alive<1, 2>())
      .def("next", [](data::ImageLoader& l) {
        py::gil_scoped_release release;
        data::ImageBatch b = l.next();
        return std::make_pair(b.images, b.labels);
      })
      .def("batches_per_epoch", &data::ImageLoader::batches_per_epoch)
      .def("__len__", &data::ImageLoader::batches_per_epoch);
}

}  // namespace kiln::python
