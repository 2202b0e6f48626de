// Training recipes: what `kiln train <recipe>` runs. A recipe owns its data,
// model and optimizer, trains with periodic evaluation and atomic
// checkpoints, and can resume bitwise-exactly from its newest checkpoint.
//
// Every recipe is one object in one table (recipe_table()). `kiln train`,
// `kiln eval`, `kiln sample`, `kiln train --help` and anything that loads a
// checkpoint by its recipe name read that table, so a new recipe is one new
// file plus one line in recipe.cpp.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/recipes/inference.h"
#include "kiln/core/device.h"
#include "models/common/sampling.h"

namespace kiln {
struct Checkpoint;
}
namespace kiln::recipes {
struct StepParts;
struct StepRequest;
}

namespace kiln::recipes {

// What the user asked for. The run-defining options are optional: unset
// means the recipe's default on a fresh run and the saved value on --resume
// (see run_config.h for which options a resume may change).
struct TrainOptions {
  std::string recipe;  // empty: the resumed run's recipe, else fashion-mlp
  // ---- options that define the run (saved in every checkpoint)
  std::optional<int64_t> steps;  // total optimizer steps
  std::optional<double> epochs;  // image recipes: total steps from epochs
  std::optional<int64_t> batch_size;
  std::optional<int64_t> micro_batch;  // gradient accumulation: examples per forward/backward (0: the batch)
  std::optional<bool> offload;         // optimizer state and fp32 master weights in host memory
  std::optional<int> zero;             // 1: shard AdamW's state across data-parallel ranks (kiln/distributed/zero.h)
  std::optional<std::string> checkpointing;  // activation checkpointing: none | selective | blocks
  // GPT recipes: a named size (models/gpt/presets.h) and field overrides
  // ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"). Part of the
  // model's config, which a resume restores and does not let change.
  std::string model_preset;
  std::map<std::string, int64_t> model_overrides;
  std::optional<double> lr;  // peak learning rate
  std::optional<uint64_t> seed;
  std::optional<std::string> precision;  // fp32, bf16 (autocast) or fp16 (autocast + loss scaling)
  std::optional<double> loss_scale;      // fp16: the initial loss scale (0: 2^16)
  // Fine-tuning (kiln train sft, apps/recipes/sft_recipe.cpp): also saved
  // in the run; a resume refuses different values.
  std::string init;                  // hf:DIR, or a fortunes-gpt run to start from
  std::string data_file, val_file;   // JSON Lines (apps/recipes/sft_data.h)
  std::optional<int64_t> max_seq_len;
  bool packing = false;              // pack examples into rows of max_seq_len (TRL's packing=True)
  std::optional<int64_t> lora_rank;  // given: LoRA adapters train, the base is frozen
  std::optional<double> lora_alpha, lora_dropout;
  std::optional<std::string> lora_targets;  // peft's module names, or all-linear
  std::string lora_from;             // a peft adapter folder to start the adapters from
  std::string quantize_base;         // LoRA on the base quantized to int8, int8b, int4 or int4z (CPU, fp32)
  std::string chat_template;         // the template "messages" lines are rendered with
  std::string distill_from;          // a teacher (hf:DIR or a fortunes-gpt run) whose softened outputs the student learns
  std::optional<double> distill_temperature, distill_alpha;
  // ---- options about this invocation (a resume may change them)
  std::optional<Device> device;  // default: cpu
  std::optional<int> threads;    // 0 or unset: all cores
  size_t memory_budget = 0;      // caps the training device's allocator (bytes; 0: none)
  int pipeline_stages = 1;       // GPT: the blocks split over this many ranks (kiln/distributed/pipeline.h)
  std::string out_dir;           // empty: runs/<recipe>
  bool resume = false;           // continue from the newest valid checkpoint in out_dir
  int64_t checkpoint_every = 0;  // 0: at the end (and each epoch for images)
  int64_t stop_after = 0;        // stop after this many steps of this invocation (0: run to the end)
  bool progress = true;          // progress bar on stderr
  // Asked after each step: true ends the run there, with a checkpoint, as
  // --stop-after does (Ctrl-C under Python's kiln.train). Single-process runs.
  std::function<bool()> interrupted;
  bool profile = false;          // time every backend op and print where the steps' time went
  bool profile_shapes = false;   // ... split by the ops' operand shapes and dtypes
  bool fit = false;              // pick micro-batch, checkpointing and offload to fit the device (kiln/apps/plan)
  double target_accuracy = 0;    // image recipes: test after every epoch, stop once reached (0: off)
  int64_t eval_every = 0;        // with target_accuracy: test every this many steps instead (0: each epoch)
  std::string data_dir;          // override the dataset directory
  std::string cache_dir;         // tokenizer cache (text recipes)
  // Fault injection for tests: multiply the loss of this (1-based) step by
  // NaN, so the divergence check and the fp16 loss scaler can be shown to
  // catch a poisoned step. 0: off. Not exposed on the command line.
  int64_t poison_step = 0;
};

struct TrainResult {
  int64_t start_step = 0;            // the step this invocation started from
  std::string resumed_from;          // the checkpoint loaded by --resume ("" on a fresh start)
  int64_t steps_done = 0;            // the step reached
  double final_train_loss = 0;
  double test_accuracy = -1;        // classifiers
  std::string test_set;             // what test_accuracy was measured on ("10000 test images")
  double val_loss = -1;             // text recipes: nats per token
  double val_bits_per_byte = -1;    // text recipes
  double items_per_second = 0;      // images/s or tokens/s over the run
  double seconds = 0;
  std::vector<std::string> samples;  // text recipes: generated text
  std::string showcase;              // image recipes: test images with predictions
  std::string checkpoint;            // the last checkpoint written
  int64_t skipped_steps = 0;         // fp16: steps skipped for inf/NaN gradients
  double seconds_to_target = -1;     // --target-accuracy: training seconds until the test set reached it (-1: not reached)
};

struct EvalResult {
  double accuracy = -1, loss = -1, bits_per_byte = -1;
};

// `kiln sample`'s sampling where neither the command nor the model sets it.
inline constexpr models::Sampling kSampleFallback{.temperature = 0.8, .top_k = 40};

struct SampleOptions {
  std::string prompt;
  int count = 3;
  int64_t max_tokens = 64;
  models::SamplingFields sampling;  // what the command sets; the model's defaults, then kSampleFallback, give the rest
  uint64_t seed = 1;
  std::string precision = "auto";  // hf:DIR weights: auto (the file's dtype), fp32 or bf16
  std::string quantize;            // "", or int8, int8b, int4, int4z (kiln/core/quantized.h)
  bool ignore_eos = false;         // never sample the end of text: every sample runs to max_tokens
};

using Log = std::function<void(const std::string&)>;

// What a recipe's model is, for the commands and the server that load it.
enum class ModelKind { image_classifier, language_model, text_classifier, text_embedder };
const char* model_kind_name(ModelKind kind);

class Recipe {
 public:
  virtual ~Recipe() = default;
  virtual std::string name() const = 0;
  virtual std::string summary() const = 0;  // one line for `kiln train --help`
  virtual ModelKind kind() const = 0;
  virtual int64_t default_batch_size() const = 0;
  virtual TrainResult train(const TrainOptions& options, const Log& log) const = 0;
  // `dir` is the checkpoint directory `ck` was loaded from.
  virtual EvalResult evaluate(const Checkpoint& ck, const std::string& dir, Device device, const Log& log) const = 0;
  // The model, optimizer settings and loss of one training step (what
  // train() runs, and what `kiln plan` measures). Default: not plannable.
  virtual StepParts step_parts(const StepRequest& request) const;
  // The model, ready for inference on `device` (kiln serve).
  virtual std::unique_ptr<InferenceModel> load_for_inference(const Checkpoint& ck, const std::string& dir,
                                                             Device device) const = 0;
  virtual bool can_sample() const { return false; }
  virtual std::vector<std::string> sample(const Checkpoint& ck, const std::string& dir, const SampleOptions& options,
                                          Device device) const;
};

// Every recipe, in the order `kiln train --help` lists them.
const std::vector<std::unique_ptr<Recipe>>& recipe_table();
std::vector<std::string> recipe_names();
// Whether `name` is a recipe that trains an image classifier, and those names.
bool is_image_recipe(const std::string& name);
std::string image_recipe_names();
// Throws naming the known recipes.
const Recipe& find_recipe(const std::string& name);
// "fashion-mlp: ...\nfashion-cnn: ..." for help texts.
std::string describe_recipes();

TrainResult train(const TrainOptions& options, const Log& log);
// How a Hugging Face language model is loaded for inference.
struct InferenceOptions {
  std::string chat_template;  // a chat template family instead of the folder's own (--chat-template)
  std::string quantize = "";  // "", or int8, int8b, int4, int4z: quantize the weights (--quantize)
};
// Loads a checkpoint directory (or a run directory's newest), or hf:DIR, for inference.
struct LoadedModel {
  std::string recipe;
  ModelKind kind;
  int64_t step = 0;
  std::unique_ptr<InferenceModel> model;
};
LoadedModel load_for_inference(const std::string& checkpoint_or_run_dir, Device device,
                               const InferenceOptions& options = {});
// Evaluates a checkpoint directory (or the newest in a run directory), or a
// Hugging Face language model in `precision` (auto, fp32, bf16), quantized
// if `quantize` names a format.
EvalResult evaluate(const std::string& checkpoint_or_run_dir, Device device, const Log& log,
                    const std::string& precision = "auto", const std::string& quantize = "");
// Samples text from a checkpoint whose recipe generates text.
std::vector<std::string> sample(const std::string& checkpoint_or_run_dir, const SampleOptions& options,
                                Device device);

}  // namespace kiln::recipes
