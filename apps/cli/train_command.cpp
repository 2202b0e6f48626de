#include "apps/cli/train_command.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "apps/plan/fit.h"
#include "apps/recipes/precision.h"
#include "apps/recipes/recipe.h"
#include "kiln/core/units.h"
#include "kiln/distributed/world.h"

namespace kiln::cli {

void print_line(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

namespace {

void print_summary(const recipes::TrainResult& r) {
  std::printf("\n==== summary ====\n");
  std::printf("steps:       %lld in %.1f s (%.0f items/s)\n", (long long)r.steps_done, r.seconds,
              r.items_per_second);
  std::printf("train loss:  %.4f\n", r.final_train_loss);
  if (r.skipped_steps > 0)
    std::printf("skipped:     %lld steps (fp16 inf/NaN gradients)\n", (long long)r.skipped_steps);
  if (!r.showcase.empty()) std::printf("%s", r.showcase.c_str());
  if (r.test_accuracy >= 0) std::printf("test accuracy: %.4f (%s)\n", r.test_accuracy, r.test_set.c_str());
  if (r.seconds_to_target >= 0) std::printf("time to target: %.1f s of training\n", r.seconds_to_target);
  if (r.val_loss >= 0 && r.val_bits_per_byte >= 0)
    std::printf("validation:  %.4f nats/token, %.4f bits per byte\n", r.val_loss, r.val_bits_per_byte);
  else if (r.val_loss >= 0)
    std::printf("validation:  %.4f nats/token\n", r.val_loss);
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

// An option whose value reaches TrainOptions only when given: --resume must
// tell a given value from a default (apps/recipes/run_config.h).
template <typename T>
std::function<void()> optional_option(CLI::App* cmd, const std::string& flag, std::optional<T>& into,
                                      const std::string& help, const CLI::Validator& check = CLI::Validator()) {
  auto value = std::make_shared<T>();
  CLI::Option* opt = cmd->add_option(flag, *value, help);
  if (check.get_description() != "" || check.get_name() != "") opt->check(check);
  return [opt, value, &into] {
    if (*opt) into = *value;
  };
}

}  // namespace

std::function<std::optional<recipes::TrainOptions>()> add_train_options(CLI::App& app) {
  auto to = std::make_shared<recipes::TrainOptions>();
  auto* cmd = app.add_subcommand("train", "train a recipe (default: fashion-mlp)");
  cmd->footer("recipes:\n" + recipes::describe_recipes() +
              "\nWith --resume, a run keeps its saved settings: --steps/--epochs (to extend it), --micro-batch, "
              "--offload, --checkpoint-activations, --threads, --device and --no-progress may change; a different "
              "--seed, --batch-size, --lr, --precision or model is refused.");
  cmd->add_option("recipe", to->recipe, "which recipe (default: fashion-mlp, or the resumed run's)")
      ->check(CLI::IsMember(recipes::recipe_names()));
  std::vector<std::function<void()>> apply = {
      optional_option(cmd, "--steps", to->steps, "total optimizer steps (default: from --epochs or the recipe)",
                      kNonNegative),
      optional_option(cmd, "--epochs", to->epochs, "epochs over the training set (image recipes)", kNonNegative),
      optional_option(cmd, "--batch-size", to->batch_size, "examples per step", kNonNegative),
      optional_option(cmd, "--micro-batch", to->micro_batch,
                      "gradient accumulation: examples per forward/backward pass (default: the batch)", kNonNegative),
      optional_option(cmd, "--lr", to->lr, "peak learning rate", kNonNegative),
      optional_option(cmd, "--threads", to->threads, "CPU threads (default: all cores)", kNonNegative),
      optional_option(cmd, "--seed", to->seed, "seed for initialisation, shuffling and dropout (default: 1337)"),
      optional_option(cmd, "--precision", to->precision,
                      "fp32 (default) | bf16 (autocast) | fp16 (autocast + loss scaling)",
                      CLI::IsMember(recipes::precision_names())),
      optional_option(cmd, "--loss-scale", to->loss_scale, "fp16: initial loss scale (default: 65536)",
                      kNonNegative),
      optional_option(cmd, "--checkpoint-activations", to->checkpointing,
                      "none (default) | selective (recompute layernorm, GELU, head merges) | blocks (recompute "
                      "each transformer block): less activation memory for more compute",
                      CLI::IsMember({"none", "selective", "blocks"})),
      optional_option(cmd, "--max-seq-len", to->max_seq_len,
                      "sft: examples longer than this many tokens are cut (default 1024)", kNonNegative),
      optional_option(cmd, "--lora-rank", to->lora_rank,
                      "sft: train LoRA adapters of this rank on a frozen base instead of every weight"),
      optional_option(cmd, "--lora-alpha", to->lora_alpha, "sft: LoRA's alpha; adapters are scaled by alpha/rank "
                      "(default: twice the rank)", kNonNegative),
      optional_option(cmd, "--lora-dropout", to->lora_dropout, "sft: dropout on the adapters' input (default 0)",
                      CLI::Range(0.0, 0.99)),
      optional_option(cmd, "--lora-targets", to->lora_targets,
                      "sft: the layers that get adapters, by peft's module names (default: peft's for the model, "
                      "q_proj,v_proj for the Llama family, c_attn for GPT-2; all-linear: every linear layer but the head)"),
      optional_option(cmd, "--distill-temperature", to->distill_temperature,
                      "sft --distill-from: the temperature that softens both distributions (default 2)", kNonNegative),
      optional_option(cmd, "--distill-alpha", to->distill_alpha,
                      "sft --distill-from: the weight of the teacher's soft targets; 1 - alpha weighs the data's "
                      "tokens (default 0.5)", CLI::Range(0.0, 1.0)),
  };
  cmd->add_option("--distill-from", to->distill_from, "sft: distil this teacher (hf:DIR or a fortunes-gpt run, with "
                  "the student's tokenizer) into the model");
  cmd->add_option("--init", to->init, "sft: the model to fine-tune: hf:DIR (a Hugging Face folder), gguf:FILE or a fortunes-gpt "
                  "run directory");
  cmd->add_option("--data", to->data_file, "sft: training examples, JSON Lines: {\"text\"}, {\"prompt\", "
                  "\"completion\"} or {\"messages\"}");
  cmd->add_option("--val", to->val_file, "sft: held-out examples (same format); their loss is reported before and "
                  "after training");
  cmd->add_flag("--packing", to->packing, "sft: pack the examples into rows of --max-seq-len tokens instead of one "
                "padded example a row (TRL's packing; an example attends to those before it in its row)");
  cmd->add_option("--quantize-base", to->quantize_base, "sft with LoRA: quantize the frozen base to int8, int4 or "
                  "int4z (QLoRA-style: a quarter to an eighth of its f32 memory; CPU, fp32)")
      ->check(CLI::IsMember({"int8", "int4", "int4z"}));
  cmd->add_option("--lora-from", to->lora_from, "sft: start the adapters from a peft adapter folder (its rank, alpha, "
                  "targets and dropout)");
  cmd->add_option("--chat-template", to->chat_template, "sft: the chat template that renders \"messages\" lines "
                  "(default: the model folder's own)");
  auto device = std::make_shared<std::string>();
  auto* device_opt = cmd->add_option("--device", *device, "cpu, cuda (under a launcher: the rank's GPU, cuda:LOCAL_RANK), cuda:N, or cpu:N (a simulated device)");
  auto offload = std::make_shared<bool>(false);
  auto* offload_opt =
      cmd->add_flag("--offload", *offload, "keep AdamW's state and the fp32 master weights in host memory");
  cmd->add_option("--out", to->out_dir, "run directory for checkpoints (default: runs/<recipe>)");
  cmd->add_flag("--resume", to->resume, "continue from the newest checkpoint in the run directory");
  cmd->add_option("--checkpoint-every", to->checkpoint_every, "also checkpoint every N steps")->check(kNonNegative);
  cmd->add_option("--stop-after", to->stop_after, "stop (with a checkpoint) after N steps of this invocation")
      ->check(kNonNegative);
  cmd->add_option("--data-dir", to->data_dir, "dataset directory override");
  cmd->add_option("--preset", to->model_preset,
                  "GPT recipes: the model's size (gpt2, gpt2-medium, gpt2-large, gpt2-xl; default: the recipe's)");
  auto model_fields = std::make_shared<std::map<std::string, int64_t>>();
  for (const char* field : {"n-layer", "n-head", "n-embd", "block-size", "vocab-size"})
    cmd->add_option(std::string("--") + field, (*model_fields)[field],
                    "GPT recipes: override the model's " + std::string(field))
        ->check(kNonNegative);
  auto memory_budget = std::make_shared<std::string>();
  cmd->add_option("--memory-budget", *memory_budget,
                  "cap the training device's memory (e.g. 2GiB): past it, allocations fail as a full device would");
  cmd->add_flag("--fit", to->fit,
                "pick --micro-batch, --checkpoint-activations and --offload so the run fits --memory-budget or the "
                "GPU (kiln plan's fastest plan that fits; the precision stays)");
  auto zero = std::make_shared<int>(0);
  auto* zero_opt = cmd->add_option("--zero", *zero,
                                   "under mpirun: 1 shards AdamW's state across the ranks (ZeRO stage 1); 0: off")
                       ->check(CLI::Range(0, 1));
  cmd->add_option("--pipeline-stages", to->pipeline_stages,
                  "under mpirun, fortunes-gpt: split the model's blocks into this many stages on as many ranks "
                  "(1F1B; the world is replicas x stages)")
      ->check(CLI::PositiveNumber);
  auto dist_timeout = std::make_shared<int>(300);
  cmd->add_option("--dist-timeout", *dist_timeout,
                  "in a multi-rank job: seconds a rank waits on the others, at the rendezvous and in every collective, "
                  "before ending the job with an error (default 300)")
      ->check(CLI::PositiveNumber);
  auto no_progress = std::make_shared<bool>(false);
  cmd->add_flag("--no-progress", *no_progress, "no progress bar");
  cmd->add_flag("--profile", to->profile, "time every backend op and print where the steps' time went");
  cmd->add_flag("--profile-shapes", to->profile_shapes,
                "with --profile, split each op's time by its operands' shapes and dtypes");
  cmd->add_option("--target-accuracy", to->target_accuracy,
                  "image recipes: test after every epoch and stop once the test accuracy reaches this; prints the "
                  "seconds of training it took (time to accuracy)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--eval-every", to->eval_every,
                  "with --target-accuracy: test every this many steps instead of after every epoch, so the time to "
                  "accuracy is not rounded up to an epoch")
      ->check(CLI::PositiveNumber);

  return [=]() -> std::optional<recipes::TrainOptions> {
    if (!*cmd) return std::nullopt;
    for (const auto& f : apply) f();
    if (*device_opt) to->device = Device::parse(*device);
    // Several ranks on one node: plain "cuda" is this rank's own GPU, cuda:LOCAL_RANK (torchrun's convention).
    if (*device_opt && *device == "cuda" && distributed::local_world_size() > 1) to->device = Device::cuda(distributed::local_rank());
    if (*offload_opt) to->offload = *offload;
    if (*zero_opt) to->zero = *zero;
    to->progress = !*no_progress;
    if (!memory_budget->empty()) to->memory_budget = parse_bytes(*memory_budget);
    for (const auto& [field, value] : *model_fields) {
      std::string key = field;
      std::replace(key.begin(), key.end(), '-', '_');
      if (value > 0) to->model_overrides[key] = value;
    }
    distributed::set_rendezvous_timeout(std::chrono::seconds(*dist_timeout));  // before world() joins
    if (*dist_timeout > 0) distributed::world().set_timeout(std::chrono::seconds(*dist_timeout));
    return *to;
  };
}

recipes::TrainResult run_train(recipes::TrainOptions options, const recipes::Log& log) {
  if (options.fit) plan::apply_fit(options, log);
  if (options.precision == "bf16" &&
      recipes::bf16_falls_back_to_fp32(options.device.value_or(Device::cpu()), log, "training"))
    options.precision = "fp32";
  return recipes::train(options, log);
}

std::function<int()> add_train_command(CLI::App& app) {
  auto options = add_train_options(app);
  return [options]() -> int {
    std::optional<recipes::TrainOptions> o = options();
    if (!o) return -1;
    // Under mpirun only rank 0 talks; every rank trains.
    const recipes::Log log = distributed::is_rank0() ? recipes::Log(print_line) : [](const std::string&) {};
    if (!distributed::is_rank0()) o->progress = false;
    const recipes::TrainResult result = run_train(std::move(*o), log);
    if (distributed::is_rank0()) print_summary(result);
    return 0;
  };
}

}  // namespace kiln::cli
