// `kiln plan`: what a training run needs in memory, whether it fits a GPU
// (or a --memory-budget), which strategies make it fit at what cost in
// speed, and what the whole run costs.
//
// Memory comes from the engine itself: every strategy combination runs one
// real training step (forward, backward, optimizer) of the recipe's model on
// the meta device, whose allocator records every allocation with its
// category and holds no data (memory_probe.h). Speed comes from FLOPs and a
// stated MFU (cost.h). See docs/MEMORY.md.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/plan/cost.h"
#include "apps/plan/gpu_table.h"
#include "kiln/nn/lora.h"

namespace kiln::plan {

// One combination of the memory strategies.
struct Strategy {
  std::string precision = "fp32";      // fp32 | bf16 | fp16
  std::string checkpointing = "none";  // none | selective | blocks
  int64_t micro_batch = 0;             // examples per forward/backward (== batch: no accumulation)
  bool offload = false;                // optimizer state + fp32 master weights in host memory
  std::string str() const;             // "bf16, blocks, micro-batch 4, offload"
};

// Peak bytes of one training step by category, on the device and the host.
struct StepMemory {
  size_t weights = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0, other = 0;
  size_t peak = 0;       // the device's peak total (not the sum of category peaks)
  size_t host_peak = 0;  // offload: what lives in host memory
  double flops = 0;      // matrix-product FLOPs of the step as the engine ran it (0: unknown)
};

struct Estimate {
  Strategy strategy;
  // The precision the run really takes when it is not the strategy's: bf16
  // on a CPU without bf16 instructions trains in fp32 (and is planned so).
  std::string runs_as;
  StepMemory memory;
  bool fits = false;
  double step_seconds = 0;        // predicted, on the target GPU
  double recompute_seconds = 0;   // of which: activation recomputation
  double transfer_seconds = 0;    // offload: host<->device traffic not hidden behind compute
  double host_optimizer_seconds = 0;
  double flops = 0;  // of the step, what the time assumes
};

struct PlanTarget {
  std::optional<GpuSpec> gpu;           // a GPU from the table
  std::optional<size_t> memory_budget;  // or a byte budget (exact: the allocator's own count)
  size_t capacity() const;              // the bytes a step may peak at
};

struct PlanInput {
  std::string recipe;       // fortunes-gpt (or a GPT preset), or an image recipe
  models::GptConfig gpt;    // GPT recipes: the model (preset + overrides); for hf, block_size is the sequence
  nlohmann::json hf_config;  // --model hf:DIR: its config.json (the model is built from it on meta)
  std::optional<nn::LoraConfig> lora;  // hf: LoRA adapters train on a frozen base (kiln train sft --lora-rank)
  int64_t batch_size = 0;
  // Fixed by the user, or empty to consider every value.
  std::optional<std::string> precision, checkpointing;
  std::optional<int64_t> micro_batch;
  std::optional<bool> offload;
  PlanTarget target;
  double mfu = 0.40;
  double tokens = 0;  // or steps * batch * T
  int gpus = 1;
  std::optional<double> price_per_hour;  // default: the table's rent
  double kwh_price = 0.15;               // USD per kWh, for owning
};

struct Plan {
  PlanInput input;
  std::vector<Estimate> estimates;  // every combination considered
  std::optional<size_t> best;       // index of the fastest that fits
  std::optional<RunCost> cost;      // with --tokens/--steps, for the best (or plain) strategy
  DataParallel data_parallel;       // with --gpus above 1, for the same strategy
  int64_t parameters = 0;
  int64_t trainable = 0;  // of which train (LoRA: the adapters)
  double tokens_per_step = 0;
  // The fastest estimate that fits, or the plain one when none does: what
  // the cost and the data parallelism are priced for.
  const Estimate& chosen() const { return best ? estimates[*best] : estimates.front(); }
  // Seconds of one GPU per token under chosen(), communication included.
  double gpu_seconds_per_token() const {
    return (chosen().step_seconds + data_parallel.exposed_seconds) / tokens_per_step;
  }
  nlohmann::json to_json() const;
  std::string to_text() const;
};

nlohmann::json to_json(const RunCost& cost);

// The step's memory under one strategy (the meta-device probe in
// production; tests may substitute).
using MemoryProbe = std::function<StepMemory(const PlanInput&, const Strategy&)>;

// Every combination the input leaves open, each probed and timed; the
// fastest that fits is `best`.
Plan make_plan(const PlanInput& input, const MemoryProbe& probe);

// The combinations make_plan considers for `input` (micro-batches: the batch
// and its halvings down to 1).
std::vector<Strategy> strategies_for(const PlanInput& input);

// "21.9 ms", "1.25 s", "6.0 h".
std::string format_seconds(double seconds);

}  // namespace kiln::plan
