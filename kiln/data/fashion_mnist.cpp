#include "kiln/data/fashion_mnist.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "kiln/data/idx.h"

namespace kiln::data {

namespace {

constexpr int64_t kSide = 28;
constexpr int64_t kClasses = 10;

std::string install_hint() {
  return std::string("install it with: sudo apt-get install ") + kFashionMnistPackage +
         " (or set KILN_FASHION_MNIST_DIR to a folder holding the four *-ubyte.gz files)";
}

}  // namespace

std::string fashion_mnist_dir(const std::string& dir) {
  if (!dir.empty()) return dir;
  const char* env = std::getenv("KILN_FASHION_MNIST_DIR");
  if (env && *env) return env;
  return kFashionMnistDefaultDir;
}

const std::array<const char*, 10>& fashion_mnist_class_names() {
  static const std::array<const char*, 10> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

ImageDataset load_fashion_mnist(FashionMnistPart part, const std::string& dir_arg) {
  namespace fs = std::filesystem;
  const std::string dir = fashion_mnist_dir(dir_arg);
  const char* prefix = part == FashionMnistPart::train ? "train" : "t10k";
  const std::string images_path = (fs::path(dir) / (std::string(prefix) + "-images-idx3-ubyte.gz")).string();
  const std::string labels_path = (fs::path(dir) / (std::string(prefix) + "-labels-idx1-ubyte.gz")).string();

  std::error_code ec;
  KILN_CHECK(fs::is_directory(dir, ec), "Fashion-MNIST directory ", dir, " does not exist; ", install_hint());
  for (const std::string& p : {images_path, labels_path})
    KILN_CHECK(fs::is_regular_file(p, ec), "Fashion-MNIST file ", p, " not found; ", install_hint());

  IdxArray images = read_idx_gz(images_path);
  IdxArray labels = read_idx_gz(labels_path);
  KILN_CHECK(images.dims.size() == 3 && images.dims[1] == kSide && images.dims[2] == kSide, images_path,
             ": expected images of shape [N, 28, 28], the header says ", shape_str(images.dims));
  KILN_CHECK(labels.dims.size() == 1, labels_path, ": expected labels of shape [N], the header says ",
             shape_str(labels.dims));
  const int64_t n = images.dims[0];
  KILN_CHECK(labels.dims[0] == n, labels_path, ": holds ", labels.dims[0], " labels but ", images_path, " holds ", n,
             " images; the files do not belong together");

  ImageDataset out;
  out.num_classes = kClasses;
  out.images = Tensor::empty({n, kSide, kSide}, DType::u8);
  if (n > 0) std::memcpy(out.images.data<uint8_t>(), images.data.data(), images.data.size());
  out.labels = Tensor::empty({n}, DType::i64);
  int64_t* l = out.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    uint8_t v = labels.data[size_t(i)];
    KILN_CHECK(v < kClasses, labels_path, ": label ", int(v), " of example ", i, " is not a class index 0..9",
               "; the file is corrupt");
    l[i] = v;
  }
  return out;
}

}  // namespace kiln::data
