// fashion-mlp and fashion-cnn: Fashion-MNIST classifiers trained with AdamW
// and a warmup + cosine schedule, validated every epoch on 5,000 held-out
// training images and finally tested on the 10,000 test images.
#include <cmath>
#include <cstdio>

#include "apps/recipes/common.h"
#include "apps/recipes/image_recipe.h"
#include "apps/recipes/precision.h"
#include "apps/recipes/progress.h"
#include "kiln/data/loader.h"
#include "kiln/data/splits.h"
#include "models/vision/classifiers.h"

namespace kiln::recipes {

namespace {

struct ImageDefaults {
  double epochs, lr, weight_decay;
  int64_t batch_size;
};

ImageDefaults defaults_for(const std::string& recipe) {
  if (recipe == "fashion-cnn") return {6, 2e-3, 1e-4, 128};
  return {12, 1e-3, 1e-4, 128};
}

}  // namespace

std::string showcase_predictions(nn::Module& model, const data::ImageDataset& ds, int count, Device device) {
  NoGradGuard ng;
  model.eval();
  data::ImageLoaderOptions lo;
  lo.batch_size = count;
  lo.shuffle = false;
  std::vector<int64_t> rows;
  for (int i = 0; i < count; ++i) rows.push_back(int64_t(i) * 997 % ds.size());  // spread over the test set
  data::ImageLoader loader(ds, rows, lo);
  data::ImageBatch batch = loader.next();
  std::vector<int64_t> pred = argmax(model.forward(batch.images.to(device)), 1).to_vector<int64_t>();
  std::vector<int64_t> truth = batch.labels.to_vector<int64_t>();
  model.train();
  // Side by side, two pixel rows per text row, darker pixels in denser glyphs.
  const char* shades = " .:-=+*#%@";
  const uint8_t* pixels = ds.images.data<uint8_t>();
  std::string out = "\nsome test images and what the model says:\n";
  for (int y = 0; y < 28; y += 2) {
    for (int i = 0; i < count; ++i) {
      const uint8_t* img = pixels + rows[size_t(i)] * 28 * 28;
      for (int x = 0; x < 28; ++x) out += shades[(img[y * 28 + x] + img[(y + 1) * 28 + x]) * 9 / 510];
      out += "  ";
    }
    out += "\n";
  }
  const auto& names = data::fashion_mnist_class_names();
  for (int i = 0; i < count; ++i) {
    std::string label = std::string(names[size_t(pred[size_t(i)])]) + (pred[size_t(i)] == truth[size_t(i)] ? " ok" : " X");
    label.resize(30, ' ');
    out += label;
  }
  return out + "\n\n";
}

std::shared_ptr<nn::Sequential> make_image_model(const std::string& recipe, uint64_t seed,
                                                 std::shared_ptr<Generator> dropout_gen) {
  Generator init(seed);
  if (recipe == "fashion-mlp") return models::make_mlp(init);
  if (recipe == "fashion-cnn") return models::make_cnn(init, std::move(dropout_gen));
  KILN_FAIL("unknown image recipe '", recipe, "'");
}

double image_accuracy(nn::Module& model, const data::ImageDataset& ds, const std::vector<int64_t>& rows,
                      Device device) {
  NoGradGuard ng;
  model.eval();
  data::ImageLoaderOptions lo;
  lo.batch_size = 500;
  lo.shuffle = false;
  data::ImageLoader loader(ds, rows, lo);
  int64_t correct = 0, seen = 0;
  for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    data::ImageBatch batch = loader.next();
    Tensor pred = argmax(model.forward(batch.images.to(device)), 1);
    std::vector<int64_t> p = pred.to_vector<int64_t>(), y = batch.labels.to_vector<int64_t>();
    for (size_t i = 0; i < p.size(); ++i) correct += p[i] == y[i];
    seen += int64_t(p.size());
  }
  model.train();
  return seen ? double(correct) / double(seen) : 0.0;
}

TrainResult train_image(const TrainOptions& o, const Log& log) {
  setup_runtime(o, log);
  const ImageDefaults d = defaults_for(o.recipe);
  const int64_t batch_size = o.batch_size > 0 ? o.batch_size : d.batch_size;
  const double max_lr = o.lr > 0 ? o.lr : d.lr;
  const std::string out_dir = resolve_out_dir(o);

  data::ImageDataset train_set = data::load_fashion_mnist(data::FashionMnistPart::train, o.data_dir);
  data::ImageDataset test_set = data::load_fashion_mnist(data::FashionMnistPart::test, o.data_dir);
  data::Split split = data::split_indices(train_set.size(), data::kFashionMnistValidationSize);
  data::ImageLoaderOptions lo;
  lo.batch_size = batch_size;
  lo.drop_last = true;
  lo.seed = o.seed;
  data::ImageLoader loader(train_set, split.train, lo);
  const int64_t per_epoch = loader.batches_per_epoch();
  const double epochs = o.epochs > 0 ? o.epochs : d.epochs;
  const int64_t total = o.steps > 0 ? o.steps : std::max<int64_t>(1, int64_t(std::llround(epochs * double(per_epoch))));

  auto dropout_gen = std::make_shared<Generator>(o.seed ^ 0xD0D0D0D0ull);
  auto model = make_image_model(o.recipe, o.seed, dropout_gen);
  model->to(o.device);
  optim::AdamWOptions ao;
  ao.weight_decay = d.weight_decay;
  optim::AdamW opt(model->named_parameters(), max_lr, ao);
  MixedPrecision precision(o.precision, o.loss_scale);

  RunParts parts{*model, opt, precision, *dropout_gen, [&] { return loader.state(); },
                 [&](const data::LoaderState& st) { loader.set_state(st); }};
  const int64_t start = resume_run(o, out_dir, parts, log);
  log(o.recipe + ": " + std::to_string(model->parameter_count()) + " parameters, " + std::to_string(total) +
      " steps of " + std::to_string(batch_size) + " images (" + std::to_string(per_epoch) + " steps per epoch)");

  auto state_json = [&](int64_t step, double loss) {
    nlohmann::json j = run_state(o, parts, step, total, loss);
    j["batch_size"] = batch_size;
    j["lr"] = max_lr;
    return j;
  };

  TrainResult result;
  ProgressBar bar(total, start, "img", o.progress);
  const int64_t warmup = std::min<int64_t>(100, total / 10);
  double loss_value = 0;
  int64_t step = start;
  for (; step < total; ++step) {
    data::ImageBatch batch = loader.next();
    Tensor loss;
    {
      amp::AutocastGuard autocast(precision.autocast_dtype());  // fp32: off
      loss = cross_entropy(model->forward(batch.images.to(o.device)), batch.labels.to(o.device));
    }
    opt.zero_grad();
    const bool finite = precision.backward(loss, model->parameters(), step + 1, log);  // fp16 may skip
    opt.lr = optim::warmup_cosine_lr(step, warmup, total, max_lr, max_lr * 0.02);
    if (finite) opt.step();
    loss_value = loss.item();
    KILN_CHECK(std::isfinite(loss_value), "training diverged at step ", step + 1, " (loss ", loss_value,
               "); lower the learning rate with --lr");
    bar.update(step, loss_value, batch_size);
    const bool epoch_end = (step + 1) % per_epoch == 0;
    const bool stop_now = o.stop_after > 0 && step + 1 - start >= o.stop_after;
    const bool periodic = o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0;
    if (epoch_end && step + 1 < total) {
      bar.finish();
      char line[128];
      std::snprintf(line, sizeof line, "epoch %lld: train loss %.4f, validation accuracy %.4f",
                    (long long)((step + 1) / per_epoch), loss_value,
                    image_accuracy(*model, train_set, split.validation, o.device));
      log(line);
    }
    if (epoch_end || periodic || stop_now) result.checkpoint = save_run(out_dir, step + 1, *model, opt, state_json(step + 1, loss_value));
    if (stop_now) {
      ++step;
      break;
    }
  }
  bar.finish();
  result.steps_done = step;
  result.skipped_steps = precision.skipped_steps();
  result.final_train_loss = loss_value;
  result.items_per_second = bar.items_per_second();
  result.seconds = bar.elapsed_seconds();
  if (step >= total) {
    if (result.checkpoint.empty() || result.checkpoint.find(checkpoint_dir_name(step)) == std::string::npos)
      result.checkpoint = save_run(out_dir, step, *model, opt, state_json(step, loss_value));
    result.test_accuracy = image_accuracy(*model, test_set, {}, o.device);
    result.showcase = showcase_predictions(*model, test_set, 4, o.device);
  }
  return result;
}

}  // namespace kiln::recipes
