// Trains a small MLP on Debian's Fashion-MNIST with an installed Kiln:
//   train_mlp [STEPS]   (default 300), then prints the test accuracy.
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>

using namespace kiln;

// Images [N, 28, 28] u8 -> [N, 784] f32 in [0, 1].
Tensor flat_pixels(const Tensor& images) {
  return mul_scalar(to_dtype(reshape(images, {images.size(0), 784}), DType::f32), 1.0 / 255.0);
}

int main(int argc, char** argv) {
  try {
    const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300, batch = 64;
    const data::ImageDataset train = data::load_fashion_mnist(data::FashionMnistPart::train);
    const data::ImageDataset test = data::load_fashion_mnist(data::FashionMnistPart::test);
    Generator init(0);
    nn::Sequential model;
    model.add(std::make_shared<nn::Linear>(784, 128, init))
        .add(std::make_shared<nn::ReLU>())
        .add(std::make_shared<nn::Linear>(128, 10, init));
    optim::AdamW opt(model.named_parameters(), 1e-3);
    std::printf("Kiln %s: an MLP of %lld parameters\n", kiln::version(), (long long)model.parameter_count());
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t first = (step * batch) % (train.size() - batch);
      const Tensor x = flat_pixels(train.images.slice(0, first, first + batch));
      const Tensor y = train.labels.slice(0, first, first + batch);
      Tensor loss = cross_entropy(model(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      if ((step + 1) % 100 == 0) std::printf("step %lld: loss %.4f\n", (long long)step + 1, loss.item());
    }
    NoGradGuard no_grad;
    const std::vector<int64_t> predicted = argmax(model(flat_pixels(test.images)), 1).to_vector<int64_t>();
    const std::vector<int64_t> truth = test.labels.to_vector<int64_t>();
    int64_t right = 0;
    for (size_t i = 0; i < truth.size(); ++i) right += predicted[i] == truth[i];
    std::printf("test accuracy: %.4f\n", double(right) / double(truth.size()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
