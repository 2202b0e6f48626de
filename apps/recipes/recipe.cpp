#include "apps/recipes/recipe.h"

#include <cmath>
#include <filesystem>

#include "apps/recipes/common.h"
#include "apps/recipes/gpt_recipe.h"
#include "apps/recipes/image_recipe.h"
#include "kiln/data/splits.h"

namespace kiln::recipes {

std::vector<std::string> recipe_names() { return {"fashion-mlp", "fashion-cnn", "fortunes-gpt"}; }

TrainResult train(const TrainOptions& o, const Log& log) {
  if (o.recipe == "fashion-mlp" || o.recipe == "fashion-cnn") return train_image(o, log);
  if (o.recipe == "fortunes-gpt") return train_gpt(o, log);
  KILN_FAIL("unknown recipe '", o.recipe, "' (choose one of fashion-mlp, fashion-cnn, fortunes-gpt)");
}

namespace {

std::unique_ptr<models::Gpt> load_gpt(const Checkpoint& ck, Device device) {
  Generator init(0);
  auto model = std::make_unique<models::Gpt>(models::GptConfig::from_json(ck.state.at("config")), init,
                                             std::make_shared<Generator>(0));
  model->load_parameters(to_pairs(ck.model));
  model->to(device);
  return model;
}

data::Tokenizer load_run_tokenizer(const std::string& checkpoint, const Checkpoint& ck) {
  auto run_dir = std::filesystem::path(checkpoint).parent_path();
  return data::Tokenizer::load((run_dir / ck.state.value("tokenizer", "tokenizer.model")).string());
}

}  // namespace

EvalResult evaluate(const std::string& path, Device device, const Log& log) {
  std::string dir = resolve_checkpoint(path);
  Checkpoint ck = load_checkpoint(dir);
  std::string recipe = ck.state.value("recipe", "");
  log("evaluating " + dir + " (" + recipe + ", step " + std::to_string(ck.step) + ")");
  EvalResult r;
  if (recipe == "fashion-mlp" || recipe == "fashion-cnn") {
    auto model = make_image_model(recipe, 0, std::make_shared<Generator>(0));
    model->load_parameters(to_pairs(ck.model));
    model->to(device);
    r.accuracy = image_accuracy(*model, data::load_fashion_mnist(data::FashionMnistPart::test), {}, device);
    return r;
  }
  if (recipe == "fortunes-gpt") {
    auto model = load_gpt(ck, device);
    TextStream val = fortunes_validation(load_run_tokenizer(dir, ck));
    r.loss = validation_loss(*model, val.tokens, 16, device);
    r.bits_per_byte = r.loss / std::log(2.0) / val.bytes_per_token;
    return r;
  }
  KILN_FAIL("checkpoint ", dir, " names an unknown recipe '", recipe, "'");
}

std::vector<std::string> sample(const std::string& path, const std::string& prompt, int count, int64_t max_tokens,
                                double temperature, int64_t top_k, uint64_t seed, Device device) {
  std::string dir = resolve_checkpoint(path);
  Checkpoint ck = load_checkpoint(dir);
  KILN_CHECK(ck.state.value("recipe", "") == "fortunes-gpt", "kiln sample needs a language-model checkpoint; ", dir,
             " is from '", ck.state.value("recipe", ""), "'");
  auto model = load_gpt(ck, device);
  data::Tokenizer tok = load_run_tokenizer(dir, ck);
  Generator gen(seed);
  return sample_gpt(*model, tok, prompt, count, max_tokens, temperature, top_k, gen);
}

}  // namespace kiln::recipes
