// Training recipes: what `kiln train <recipe>` runs. A recipe owns its data,
// model and optimizer, trains with periodic evaluation and atomic
// checkpoints, and can resume bitwise-exactly from its newest checkpoint.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/core/device.h"

namespace kiln::recipes {

struct TrainOptions {
  std::string recipe = "fashion-mlp";
  int64_t steps = 0;       // 0: derived from epochs (images) or the recipe default (text)
  double epochs = 0;       // 0: the recipe's default
  int64_t batch_size = 0;  // 0: the recipe's default
  double lr = 0;           // 0: the recipe's default
  Device device = Device::cpu();
  int threads = 0;  // 0: all cores
  uint64_t seed = 1337;
  std::string out_dir;  // empty: runs/<recipe>
  bool resume = false;  // continue from the newest valid checkpoint in out_dir
  int64_t checkpoint_every = 0;  // 0: at the end (and each epoch for images)
  int64_t stop_after = 0;        // stop after this many steps of this invocation (0: run to the end)
  bool progress = true;          // progress bar on stderr
  std::string data_dir;          // override the dataset directory
  std::string cache_dir;         // tokenizer cache (text recipes)
  std::string precision = "fp32";  // fp32, bf16 (autocast) or fp16 (autocast + loss scaling)
  double loss_scale = 0;           // fp16: the initial loss scale (0: 2^16)
};

struct TrainResult {
  int64_t steps_done = 0;
  double final_train_loss = 0;
  double test_accuracy = -1;        // image recipes
  double val_loss = -1;             // text recipes: nats per token
  double val_bits_per_byte = -1;    // text recipes
  double items_per_second = 0;      // images/s or tokens/s over the run
  double seconds = 0;
  std::vector<std::string> samples;  // text recipes: generated text
  std::string showcase;              // image recipes: test images with predictions
  std::string checkpoint;            // the last checkpoint written
  int64_t skipped_steps = 0;         // fp16: steps skipped for inf/NaN gradients
};

struct EvalResult {
  double accuracy = -1, loss = -1, bits_per_byte = -1;
};

using Log = std::function<void(const std::string&)>;

std::vector<std::string> recipe_names();
TrainResult train(const TrainOptions& options, const Log& log);
// Evaluates a checkpoint directory (or the newest in a run directory).
EvalResult evaluate(const std::string& checkpoint_or_run_dir, Device device, const Log& log);
// Samples text from a GPT checkpoint.
std::vector<std::string> sample(const std::string& checkpoint_or_run_dir, const std::string& prompt, int count,
                                int64_t max_tokens, double temperature, int64_t top_k, uint64_t seed,
                                Device device);

}  // namespace kiln::recipes
