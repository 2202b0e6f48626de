// Fashion-MNIST classifiers. Both are torch.nn.Sequential-shaped, so their
// parameter names ("1.weight", ...) match the PyTorch models in
// bench/ and tests/parity/ exactly.
#pragma once
#include "kiln/nn/layers.h"

namespace kiln::models {

// Flatten -> 784-512-256-10 with ReLU.
std::shared_ptr<nn::Sequential> make_mlp(Generator& init, int64_t hidden1 = 512, int64_t hidden2 = 256);

// Two conv(3x3, pad 1)-ReLU-maxpool(2) stages (32 and 64 channels), then
// 3136-128-10 with dropout before the classifier.
std::shared_ptr<nn::Sequential> make_cnn(Generator& init, std::shared_ptr<Generator> dropout_gen,
                                         double dropout = 0.25);

// The same two stages, half as wide (16 and 32 channels), then 1568-256-10
// without dropout: the fashion-fast recipe's model, which reaches 0.91 test
// accuracy in a fraction of the CNN's time (docs/PERFORMANCE.md).
std::shared_ptr<nn::Sequential> make_small_cnn(Generator& init);

}  // namespace kiln::models
