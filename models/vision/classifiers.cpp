#include "models/vision/classifiers.h"

namespace kiln::models {

using namespace kiln::nn;

std::shared_ptr<Sequential> make_mlp(Generator& init, int64_t h1, int64_t h2) {
  auto m = std::make_shared<Sequential>();
  m->add(std::make_shared<Flatten>());
  m->add(std::make_shared<Linear>(28 * 28, h1, init));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Linear>(h1, h2, init));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Linear>(h2, 10, init));
  return m;
}

namespace {

// conv(3x3, pad 1)-ReLU-maxpool(2) with c1 and then c2 channels, then
// Flatten: [N, 1, 28, 28] -> [N, c2 * 7 * 7].
std::shared_ptr<Sequential> conv_stages(int64_t c1, int64_t c2, Generator& init) {
  auto m = std::make_shared<Sequential>();
  m->add(std::make_shared<Conv2d>(1, c1, 3, init, 1, 1));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<MaxPool2d>(2));
  m->add(std::make_shared<Conv2d>(c1, c2, 3, init, 1, 1));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<MaxPool2d>(2));
  m->add(std::make_shared<Flatten>());
  return m;
}

}  // namespace

std::shared_ptr<Sequential> make_cnn(Generator& init, std::shared_ptr<Generator> dropout_gen, double p) {
  auto m = conv_stages(32, 64, init);
  m->add(std::make_shared<Linear>(64 * 7 * 7, 128, init));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Dropout>(p, std::move(dropout_gen)));
  m->add(std::make_shared<Linear>(128, 10, init));
  return m;
}

std::shared_ptr<Sequential> make_small_cnn(Generator& init) {
  auto m = conv_stages(16, 32, init);
  m->add(std::make_shared<Linear>(32 * 7 * 7, 256, init));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Linear>(256, 10, init));
  return m;
}

}  // namespace kiln::models
