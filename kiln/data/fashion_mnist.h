// Fashion-MNIST (Xiao et al. 2017): 70,000 28x28 grey images of clothing in
// 10 classes, 60,000 for training and 10,000 for test. Read from the gzipped
// IDX files that Debian's `dataset-fashion-mnist` package installs.
#pragma once
#include <array>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::data {

// A labelled image set held in host memory.
struct ImageDataset {
  Tensor images;  // u8 [N, H, W], raw pixel values 0..255
  Tensor labels;  // i64 [N], class indices (i64 because that is what losses take)
  int64_t num_classes = 0;
  int64_t size() const { return images.defined() ? images.size(0) : 0; }
};

enum class FashionMnistPart { train, test };

inline constexpr const char* kFashionMnistPackage = "dataset-fashion-mnist";
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
// Standard per-pixel statistics of the training images (after x/255).
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// The directory to read: `dir` when non-empty, else $KILN_FASHION_MNIST_DIR
// when set, else the Debian location.
std::string fashion_mnist_dir(const std::string& dir = "");

// Loads the training (60,000) or test (10,000) part. Missing files and
// corrupt files throw kiln::Error naming the file and what to do.
ImageDataset load_fashion_mnist(FashionMnistPart part, const std::string& dir = "");

// "T-shirt/top", "Trouser", ..., "Ankle boot", indexed by label.
const std::array<const char*, 10>& fashion_mnist_class_names();

}  // namespace kiln::data
