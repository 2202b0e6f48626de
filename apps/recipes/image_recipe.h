// fashion-mlp, fashion-cnn and fashion-fast: Fashion-MNIST classifiers.
#pragma once
#include "apps/recipes/recipe.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/nn/layers.h"

namespace kiln::recipes {

std::unique_ptr<Recipe> make_fashion_mlp_recipe();
std::unique_ptr<Recipe> make_fashion_cnn_recipe();
std::unique_ptr<Recipe> make_fashion_fast_recipe();

// The model of image recipe `recipe`, initialised from `seed`.
std::shared_ptr<nn::Sequential> make_image_model(const std::string& recipe, uint64_t seed,
                                                 std::shared_ptr<Generator> dropout_gen);
// Accuracy of `model` on `rows` of `ds` (all rows when empty), in batches
// of `batch` images (a fitted run's micro-batch keeps evaluation in budget).
double image_accuracy(nn::Module& model, const data::ImageDataset& ds, const std::vector<int64_t>& rows,
                      Device device, int64_t batch = 500);

}  // namespace kiln::recipes
