#include "apps/plan/plan_cli.h"

#include "apps/plan/serving.h"

#include <cmath>
#include <cstdio>

#include "apps/plan/gpu_choice.h"
#include "apps/plan/memory_probe.h"
#include "apps/plan/plan.h"
#include "apps/recipes/recipe.h"
#include "kiln/core/units.h"
#include "models/gpt/presets.h"
#include "models/hf/hf_model.h"

namespace kiln::plan {

double parse_count(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    KILN_FAIL("'", text, "' is not a count (examples: 10B, 300M, 64k, 2.5e9)");
  }
  const std::string unit = text.substr(used);
  double scale = 1;
  if (unit == "k" || unit == "K") scale = 1e3;
  else if (unit == "M" || unit == "m") scale = 1e6;
  else if (unit == "B" || unit == "G" || unit == "b") scale = 1e9;
  else if (unit == "T") scale = 1e12;
  else KILN_CHECK(unit.empty(), "'", text, "': unknown unit '", unit, "' (use k, M, B or T)");
  KILN_CHECK(value >= 0 && std::isfinite(value), "'", text, "' must be a non-negative count");
  return value * scale;
}

namespace {

const char* kPlanHelp = R"(Predicts what a training run needs in memory before anything runs, whether it
fits a GPU (or a memory budget), which strategies make it fit and at what cost in
speed, and what the whole run costs.

How to read the output:
  weights, gradients, optimizer, activations, workspace: the peak bytes of each,
    measured by running one real training step of the model on Kiln's meta
    device (it records every allocation and computes nothing), so the figures
    come from the engine, not from a formula;
  every combination: precision x activation checkpointing x micro-batch x
    offload, with its peak and predicted step time;
  plan: the fastest combination that fits; `kiln train ... --fit` applies it;
  cost (with --tokens or --steps): hours from FLOPs (6 N + 12 L T d per
    token, plus recomputation) at a stated MFU, rent versus buy;
  without --gpu or --memory-budget: one row per GPU of the table, with the
    fastest plan that fits it, and the pick by cost and by time.

Example: will GPT-2 XL train on a 24 GB RTX 4090, and what does it take?
  kiln plan --preset gpt2-xl --batch-size 8 --gpu RTX-4090
Plain fp32 training would peak near 60 GiB (23 GiB of weights, gradients and
AdamW state alone), so no: not as it is. The fastest plan that fits the
card's usable 22 GiB is bf16 with the optimizer state offloaded to CPU RAM
and two micro-batches of 4, at about 2.4 s a step (assuming 40% MFU),
nearly half of it the CPU's AdamW.

Which GPU should I pick? Leave out --gpu:
  kiln plan --preset gpt2 --tokens 10B
)";

}  // namespace

std::function<std::optional<PlanOutcome>()> add_plan_options(CLI::App& app) {
  auto in = std::make_shared<PlanInput>();
  auto opts = std::make_shared<std::map<std::string, std::string>>();
  auto flags = std::make_shared<std::map<std::string, bool>>();
  auto* cmd = app.add_subcommand("plan", "predict memory, the strategies that fit, time and cost of a training run");
  cmd->footer(kPlanHelp);
  // The recipes whose step the planner runs; fine-tuning is planned with
  // --model hf:DIR, and fortunes-classify's model is not modelled yet.
  std::vector<std::string> planned = {"fortunes-gpt"};
  for (const std::string& name : recipes::recipe_names())
    if (recipes::is_image_recipe(name)) planned.push_back(name);
  cmd->add_option("recipe", in->recipe,
                  "fortunes-gpt (default), or an image recipe: fashion-mlp, fashion-cnn, fashion-fast (fine-tuning: "
                  "--model hf:DIR)")
      ->check(CLI::IsMember(planned));
  auto text_option = [&](const char* flag, const char* help) { cmd->add_option(flag, (*opts)[flag], help); };
  text_option("--preset", "GPT size: gpt2 (124M, the default), gpt2-medium, gpt2-large, gpt2-xl");
  text_option("--model", "hf:DIR: a Hugging Face model folder (only its config.json is read), or gguf:FILE (its metadata)");
  text_option("--lora-rank", "with --model: LoRA adapters of this rank train on a frozen base (kiln train sft)");
  text_option("--lora-targets", "with --lora-rank: the adapted layers (default: peft's for the model; all-linear)");
  text_option("--n-layer", "override the GPT's layers");
  text_option("--n-head", "override the GPT's heads");
  text_option("--n-embd", "override the GPT's width");
  text_option("--block-size", "override the GPT's context (sequence length)");
  text_option("--vocab-size", "override the GPT's vocabulary");
  text_option("--batch-size", "examples per optimizer step (default: 8)");
  text_option("--micro-batch", "fix the micro-batch (default: consider the batch and its halvings)");
  text_option("--precision", "fix the precision: fp32, bf16 or fp16 (default: consider all)");
  text_option("--checkpoint-activations", "fix checkpointing: none, selective or blocks (default: consider all)");
  text_option("--offload", "fix CPU offload: on or off (default: consider both)");
  text_option("--gpu", "target GPU from the table (H100, A100-80GB, RTX-4090, ...); without it or --memory-budget: "
              "one row per GPU of the table, and which to pick by cost and by time");
  text_option("--gpus", "GPUs of one node in data parallel, each with its own batch: time and cost include the "
              "gradients' all-reduce (default: 1)");
  text_option("--gpu-table", "a JSON file that adds or replaces GPUs (format: apps/plan/gpus.json)");
  text_option("--memory-budget", "target a byte budget instead of a GPU (e.g. 2GiB)");
  text_option("--tokens", "tokens to train on, for time and cost (e.g. 10B)");
  text_option("--steps", "or optimizer steps, for time and cost");
  text_option("--mfu", "model FLOPs utilisation to assume (default: 0.40)");
  text_option("--price", "rental price per GPU-hour in USD (default: the table's)");
  text_option("--kwh-price", "electricity price per kWh in USD, for owning (default: 0.15)");
  cmd->add_flag("--serve", (*flags)["serve"],
                "with --model: the memory to serve it (weights and each stream's keys and values), not to train it");
  text_option("--quantize", "with --serve: count the matrices as int8, int8b, int4 or int4z (kiln serve --quantize)");
  text_option("--streams", "with --serve: sequences served at once (default: 1)");

  return [cmd, in, opts, flags]() -> std::optional<PlanOutcome> {
    if (!*cmd) return std::nullopt;
    auto given = [&](const char* f) { return !(*opts)[f].empty(); };
    auto integer = [&](const char* f) { return int64_t(parse_count((*opts)[f])); };
    if (in->recipe.empty()) in->recipe = "fortunes-gpt";
    if (in->recipe == "fortunes-gpt") in->gpt = models::gpt_preset("fortunes");
    if (given("--preset")) {
      in->recipe = (*opts)["--preset"];
      in->gpt = models::gpt_preset(in->recipe);
    }
    if (given("--model")) {  // a Hugging Face folder: only its config.json is read
      const auto dir = models::hf_folder((*opts)["--model"]);
      KILN_CHECK(dir, "--model takes hf:DIR (a Hugging Face model folder) or gguf:FILE, got '", (*opts)["--model"], "'");
      in->hf_config = models::read_hf_config(*dir);
      in->recipe = "hf:" + in->hf_config["model_type"].get<std::string>();
      // Sequences of the model's context, up to 2,048 tokens, unless --block-size says.
      in->gpt.block_size = std::min<int64_t>(2048, in->hf_config.value("max_position_embeddings",
                                                                         in->hf_config.value("n_positions", int64_t(2048))));
    }
    if (given("--lora-rank")) {
      KILN_CHECK(given("--model"), "--lora-rank plans fine-tuning a Hugging Face model: give --model hf:DIR");
      nn::LoraConfig lora;
      lora.rank = integer("--lora-rank");
      if (given("--lora-targets")) lora.targets = nn::parse_lora_targets((*opts)["--lora-targets"]);
      in->lora = lora;
    }
    if ((*flags)["serve"]) {
      KILN_CHECK(given("--model"), "--serve plans a Hugging Face language model: give --model hf:DIR");
      const std::string path = *models::hf_folder((*opts)["--model"]);
      const std::optional<GgufFile> gguf =
          models::is_gguf_file(path) ? std::optional(GgufFile::open(path)) : std::nullopt;
      const ServingMemory m = serving_memory(
          in->hf_config, given("--quantize") ? std::optional(parse_quant_format((*opts)["--quantize"])) : std::nullopt,
          gguf ? &*gguf : nullptr);
      const int64_t streams = given("--streams") ? integer("--streams") : 1;
      size_t budget = 0;
      std::string target;
      if (given("--gpu")) {
        const GpuSpec gpu = find_gpu(load_gpu_table((*opts)["--gpu-table"]), (*opts)["--gpu"]);
        budget = size_t(gpu.memory_bytes), target = gpu.name;
      } else if (given("--memory-budget")) {
        budget = size_t(parse_bytes((*opts)["--memory-budget"])), target = "the budget";
      }
      PlanOutcome out{nlohmann::json{{"weights", m.weights},
                                     {"weight_bytes", m.weight_bytes},
                                     {"quantized_bytes", m.quantized_bytes},
                                     {"kv_bytes_per_stream", m.kv_bytes_per_stream},
                                     {"context", m.context},
                                     {"streams", streams}},
                      serving_memory_text(m, streams, budget, target), 0};
      if (given("--quantize") && given("--gpu"))
        out.text += "  (quantized products run on the CPU so far: the CUDA backend has none yet)\n";
      return out;
    }
    if (given("--n-layer")) in->gpt.n_layer = integer("--n-layer");
    if (given("--n-head")) in->gpt.n_head = integer("--n-head");
    if (given("--n-embd")) in->gpt.n_embd = integer("--n-embd");
    if (given("--block-size")) in->gpt.block_size = integer("--block-size");
    if (given("--vocab-size")) in->gpt.vocab_size = integer("--vocab-size");
    in->batch_size = given("--batch-size") ? integer("--batch-size") : 8;
    if (given("--micro-batch")) in->micro_batch = integer("--micro-batch");
    if (given("--precision")) in->precision = (*opts)["--precision"];
    if (given("--checkpoint-activations")) in->checkpointing = (*opts)["--checkpoint-activations"];
    if (given("--offload")) in->offload = (*opts)["--offload"] == "on";
    const std::vector<GpuSpec> table = load_gpu_table((*opts)["--gpu-table"]);
    if (given("--gpu")) in->target.gpu = find_gpu(table, (*opts)["--gpu"]);
    if (given("--memory-budget")) in->target.memory_budget = parse_bytes((*opts)["--memory-budget"]);
    if (given("--gpus")) in->gpus = int(integer("--gpus"));
    if (given("--mfu")) in->mfu = std::stod((*opts)["--mfu"]);
    if (given("--price")) in->price_per_hour = std::stod((*opts)["--price"]);
    if (given("--kwh-price")) in->kwh_price = std::stod((*opts)["--kwh-price"]);
    if (given("--tokens")) in->tokens = parse_count((*opts)["--tokens"]);
    if (given("--steps")) in->tokens = parse_count((*opts)["--steps"]) * double(in->batch_size) * double(in->gpt.block_size);
    if (!in->target.gpu && !in->target.memory_budget) {  // which GPU?
      const GpuChoice choice = choose_gpu(*in, table, device_probe(Device::meta()));
      return PlanOutcome{choice.to_json(), choice.to_text(), choice.cheapest ? 0 : 2};
    }
    Plan plan = make_plan(*in, device_probe(Device::meta()));
    return PlanOutcome{plan.to_json(), plan.to_text(), plan.best ? 0 : 2};
  };
}

std::function<int()> add_plan_command(CLI::App& app) {
  auto outcome = add_plan_options(app);
  CLI::App* cmd = app.get_subcommand("plan");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "print the plan as one JSON object");
  return [outcome, json]() -> int {
    std::optional<PlanOutcome> out = outcome();
    if (!out) return -1;
    if (*json) std::printf("%s\n", out->json.dump(2).c_str());
    else std::printf("%s", out->text.c_str());
    return out->exit_code;
  };
}

}  // namespace kiln::plan
