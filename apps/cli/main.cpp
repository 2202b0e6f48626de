// The kiln command: train, eval, sample, info.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "apps/cli/info.h"
#include "apps/plan/fit.h"
#include "apps/plan/plan_cli.h"
#include "apps/recipes/precision.h"
#include "apps/recipes/recipe.h"
#include "kiln/core/error.h"
#include "kiln/core/units.h"
#include "kiln/cpu/omp_policy.h"

namespace {

void print_line(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);  // progress lines must appear in logs as they happen
}

void print_summary(const kiln::recipes::TrainResult& r) {
  std::printf("\n==== summary ====\n");
  std::printf("steps:       %lld in %.1f s (%.0f items/s)\n", (long long)r.steps_done, r.seconds,
              r.items_per_second);
  std::printf("train loss:  %.4f\n", r.final_train_loss);
  if (r.skipped_steps > 0)
    std::printf("skipped:     %lld steps (fp16 inf/NaN gradients)\n", (long long)r.skipped_steps);
  if (!r.showcase.empty()) std::printf("%s", r.showcase.c_str());
  if (r.test_accuracy >= 0) std::printf("test accuracy: %.4f (10,000 test images)\n", r.test_accuracy);
  if (r.val_loss >= 0)
    std::printf("validation:  %.4f nats/token, %.4f bits per byte\n", r.val_loss, r.val_bits_per_byte);
  for (size_t i = 0; i < r.samples.size(); ++i) std::printf("sample %zu:\n%s\n---\n", i + 1, r.samples[i].c_str());
  if (!r.checkpoint.empty()) std::printf("checkpoint:  %s\n", r.checkpoint.c_str());
}

const CLI::Validator kNonNegative(
    [](std::string& v) {
      try {
        if (std::stod(v) >= 0) return std::string();
      } catch (const std::exception&) {
      }
      return "must be a number >= 0, got '" + v + "'";
    },
    "NUMBER >= 0");

}  // namespace

int main(int argc, char** argv) {
  kiln::use_passive_openmp_waiting(argv);
  CLI::App app{"Kiln: a deep-learning engine in C++20 and CUDA"};
  app.require_subcommand(1);

  kiln::recipes::TrainOptions to;
  // Run-defining options are read only when given, so --resume can tell a
  // given value from a default (apps/recipes/run_config.h).
  int64_t steps = 0, batch_size = 0, micro_batch = 0;
  double epochs = 0, lr = 0, loss_scale = 0;
  uint64_t seed = 0;
  int threads = 0;
  std::string precision, device;
  bool no_progress = false;
  auto* train = app.add_subcommand("train", "train a recipe (default: fashion-mlp)");
  train->footer("recipes:\n" + kiln::recipes::describe_recipes() +
                "\nWith --resume, a run keeps its saved settings: --steps/--epochs (to extend it), --micro-batch, "
                "--threads, --device and --no-progress may change; a different --seed, --batch-size, --lr or --precision is "
                "refused.");
  train->add_option("recipe", to.recipe, "which recipe (default: fashion-mlp, or the resumed run's)")
      ->check(CLI::IsMember(kiln::recipes::recipe_names()));
  auto* steps_opt = train->add_option("--steps", steps, "total optimizer steps (default: from --epochs or the recipe)")
                        ->check(kNonNegative);
  auto* epochs_opt = train->add_option("--epochs", epochs, "epochs over the training set (image recipes)")
                         ->check(kNonNegative);
  auto* batch_opt = train->add_option("--batch-size", batch_size, "examples per step")->check(kNonNegative);
  auto* micro_opt = train->add_option("--micro-batch", micro_batch,
                                      "gradient accumulation: examples per forward/backward pass (default: the batch)")
                       ->check(kNonNegative);
  auto* lr_opt = train->add_option("--lr", lr, "peak learning rate")->check(kNonNegative);
  auto* device_opt = train->add_option("--device", device, "cpu, cuda or cuda:N (default: cpu)");
  auto* threads_opt = train->add_option("--threads", threads, "CPU threads (default: all cores)")->check(kNonNegative);
  auto* seed_opt = train->add_option("--seed", seed, "seed for initialisation, shuffling and dropout (default: 1337)");
  train->add_option("--out", to.out_dir, "run directory for checkpoints (default: runs/<recipe>)");
  train->add_flag("--resume", to.resume, "continue from the newest checkpoint in the run directory");
  train->add_option("--checkpoint-every", to.checkpoint_every, "also checkpoint every N steps")
      ->check(kNonNegative);
  train->add_option("--stop-after", to.stop_after, "stop (with a checkpoint) after N steps of this invocation")
      ->check(kNonNegative);
  train->add_option("--data-dir", to.data_dir, "dataset directory override");
  auto* precision_opt =
      train->add_option("--precision", precision, "fp32 (default) | bf16 (autocast) | fp16 (autocast + loss scaling)")
          ->check(CLI::IsMember(kiln::recipes::precision_names()));
  auto* loss_scale_opt =
      train->add_option("--loss-scale", loss_scale, "fp16: initial loss scale (default: 65536)")->check(kNonNegative);
  bool offload = false;
  auto* offload_opt = train->add_flag("--offload", offload,
                                      "keep AdamW's state and the fp32 master weights in host memory (ZeRO-Offload)");
  train->add_option("--preset", to.model_preset, "GPT recipes: the model's size (gpt2, gpt2-medium, gpt2-large, "
                                                "gpt2-xl; default: the recipe's small model)");
  std::map<std::string, int64_t> model_fields;
  for (const char* field : {"n-layer", "n-head", "n-embd", "block-size", "vocab-size"})
    train->add_option(std::string("--") + field, model_fields[field], "GPT recipes: override the model's " +
                                                                           std::string(field))
        ->check(kNonNegative);
  std::string checkpointing;
  auto* checkpointing_opt =
      train->add_option("--checkpoint-activations", checkpointing,
                        "none (default) | selective (recompute layernorm, GELU, head merges) | blocks (recompute "
                        "each transformer block): less activation memory for more compute")
          ->check(CLI::IsMember({"none", "selective", "blocks"}));
  std::string memory_budget;
  train->add_option("--memory-budget", memory_budget,
                    "cap the training device's memory (e.g. 2GiB): past it, allocations fail as a full device would");
  train->add_flag("--fit", to.fit,
                  "pick --micro-batch, --checkpoint-activations and --offload so the run fits --memory-budget or "
                  "the GPU (kiln plan's fastest plan that fits; the precision stays)");
  train->add_flag("--no-progress", no_progress, "no progress bar");
  train->add_flag("--profile", to.profile, "time every backend op and print where the steps' time went");

  std::string eval_path, eval_device = "cpu";
  auto* eval = app.add_subcommand("eval", "evaluate a checkpoint (or a run directory's newest)");
  eval->add_option("checkpoint", eval_path, "checkpoint or run directory")->required();
  eval->add_option("--device", eval_device, "cpu, cuda or cuda:N");

  std::string sample_path = "runs/fortunes-gpt", sample_device = "cpu";
  kiln::recipes::SampleOptions so;
  auto* sample = app.add_subcommand("sample", "sample text from a language-model checkpoint");
  sample->add_option("checkpoint", sample_path, "checkpoint or run directory (default: runs/fortunes-gpt)");
  sample->add_option("--prompt", so.prompt, "text to continue");
  sample->add_option("--count", so.count, "number of samples");
  sample->add_option("--max-tokens", so.max_tokens, "tokens per sample");
  sample->add_option("--temperature", so.temperature, "softmax temperature (> 0)");
  sample->add_option("--top-k", so.top_k, "sample from the k most likely tokens (0: all)");
  sample->add_option("--seed", so.seed, "sampling seed");
  sample->add_option("--device", sample_device, "cpu, cuda or cuda:N");

  auto* info = app.add_subcommand("info", "describe this machine's CPU and GPUs");
  std::function<int()> run_plan = kiln::plan::add_plan_command(app);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*train) {
      if (*steps_opt) to.steps = steps;
      if (*epochs_opt) to.epochs = epochs;
      if (*batch_opt) to.batch_size = batch_size;
      if (*lr_opt) to.lr = lr;
      if (*micro_opt) to.micro_batch = micro_batch;
      if (*offload_opt) to.offload = offload;
      if (*checkpointing_opt) to.checkpointing = checkpointing;
      if (*seed_opt) to.seed = seed;
      if (*threads_opt) to.threads = threads;
      if (*precision_opt) to.precision = precision;
      if (*loss_scale_opt) to.loss_scale = loss_scale;
      if (*device_opt) to.device = kiln::Device::parse(device);
      to.progress = !no_progress;
      if (!memory_budget.empty()) to.memory_budget = kiln::parse_bytes(memory_budget);
      for (const auto& [field, value] : model_fields) {
        std::string key = field;
        std::replace(key.begin(), key.end(), '-', '_');
        if (value > 0) to.model_overrides[key] = value;
      }
      if (to.fit) kiln::plan::apply_fit(to, print_line);
      print_summary(kiln::recipes::train(to, print_line));
    } else if (*eval) {
      auto r = kiln::recipes::evaluate(eval_path, kiln::Device::parse(eval_device), print_line);
      if (r.accuracy >= 0) std::printf("test accuracy: %.4f\n", r.accuracy);
      if (r.loss >= 0) std::printf("validation: %.4f nats/token, %.4f bits per byte\n", r.loss, r.bits_per_byte);
    } else if (*sample) {
      for (const auto& s : kiln::recipes::sample(sample_path, so, kiln::Device::parse(sample_device)))
        std::printf("%s\n---\n", s.c_str());
    } else if (int rc = run_plan(); rc >= 0) {
      return rc;
    } else if (*info) {
      return kiln::cli::run_info();
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
